//! Counts each HTTP request the S3 SDK sends into `StoreMetrics`: an interceptor sees
//! every attempt (named by the SDK's operation name, `GetObject`, `UploadPart`, ...),
//! its answer's head and its status, and also requests that got no answer.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use aws_sdk_s3::config::interceptors::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
    FinalizerInterceptorContextRef,
};
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use parking_lot::Mutex;

use crate::metrics::{Outcome, StoreMetrics};

#[derive(Debug)]
pub(super) struct Counting(pub Arc<StoreMetrics>);

/// When this attempt was handed to the HTTP client.
#[derive(Debug, Clone)]
struct Sent(Instant);

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
        cfg.interceptor_state().store_put(Sent(Instant::now()));
        Ok(())
    }

    fn read_after_transmit(
        &self,
        _ctx: &BeforeDeserializationInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(Sent(at)) = cfg.load::<Sent>() {
            let took = at.elapsed();
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
        let Some(Sent(at)) = cfg.load::<Sent>().cloned() else {
            return Ok(());
        };
        let took = cfg.load::<Headed>().map_or_else(|| at.elapsed(), |h| h.0);
        let op = op_name(cfg.load::<Metadata>().map_or("Unknown", |m| m.name()));
        let status = ctx.response().map(|r| r.status().as_u16());
        self.0.request(op, Outcome::of_status(status), took);
        cfg.interceptor_state().unset::<Sent>().unset::<Headed>();
        Ok(())
    }
}
