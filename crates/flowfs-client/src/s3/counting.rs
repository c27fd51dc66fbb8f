//! Counts each HTTP request the S3 SDK sends into `StoreMetrics`: an interceptor sees
//! every attempt (named by the SDK's operation name, `GetObject`, `UploadPart`, ...),
//! its answer's head and its status, and also requests that got no answer.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use aws_sdk_s3::config::interceptors::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
    FinalizerInterceptorContextRef,
};
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use parking_lot::Mutex;

use crate::metrics::{Outcome, Sending, StoreMetrics};

#[derive(Debug)]
pub(super) struct Counting(pub Arc<StoreMetrics>);

/// This attempt, handed to the HTTP client: counted when its answer comes
/// (`read_after_attempt`), or as cancelled when the operation is dropped first (the bag,
/// and this with it).
#[derive(Debug, Clone)]
struct Sent(Arc<Mutex<Option<Sending>>>);

impl Storable for Sent {
    type Storer = StoreReplace<Self>;
}

/// How long its answer's head took.
#[derive(Debug, Clone)]
struct Headed(Duration);

impl Storable for Headed {
    type Storer = StoreReplace<Self>;
}

/// The SDK's operation name as a `&'static str`: one leaked copy per name, and the SDK
/// has a few dozen.
fn op_name(name: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES.get_or_init(Mutex::default).lock();
    if let Some(n) = names.get(name) {
        return n;
    }
    let n: &'static str = Box::leak(name.to_string().into_boxed_str());
    names.insert(n);
    n
}

impl Intercept for Counting {
    fn name(&self) -> &'static str {
        "flowfs-request-counting"
    }

    fn read_before_transmit(
        &self,
        _ctx: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let op = op_name(cfg.load::<Metadata>().map_or("Unknown", |m| m.name()));
        let sending = self.0.sending(op);
        cfg.interceptor_state()
            .store_put(Sent(Arc::new(Mutex::new(Some(sending)))));
        Ok(())
    }

    fn read_after_transmit(
        &self,
        _ctx: &BeforeDeserializationInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let took = (cfg.load::<Sent>()).and_then(|Sent(s)| s.lock().as_ref().map(Sending::elapsed));
        if let Some(took) = took {
            cfg.interceptor_state().store_put(Headed(took));
        }
        Ok(())
    }

    fn read_after_attempt(
        &self,
        ctx: &FinalizerInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // An attempt that was never sent (it could not be signed) is no request.
        let Some(sending) = cfg.load::<Sent>().and_then(|Sent(s)| s.lock().take()) else {
            return Ok(());
        };
        let took = cfg
            .load::<Headed>()
            .map_or_else(|| sending.elapsed(), |h| h.0);
        let status = ctx.response().map(|r| r.status().as_u16());
        sending.done(Outcome::of_status(status), took);
        cfg.interceptor_state().unset::<Sent>().unset::<Headed>();
        Ok(())
    }
}
