//! The name the S3 server gives itself in its answers' `Server` header, kept from its
//! first answer (the bucket check at mount): which store's key rules hold (rules.rs).

use std::sync::{Arc, OnceLock};

use aws_sdk_s3::config::interceptors::BeforeDeserializationInterceptorContextRef;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;

#[derive(Debug)]
pub(super) struct ServerName(pub Arc<OnceLock<String>>);

impl Intercept for ServerName {
    fn name(&self) -> &'static str {
        "flowfs-server-name"
    }

    fn read_after_transmit(
        &self,
        ctx: &BeforeDeserializationInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if self.0.get().is_none() {
            if let Some(s) = ctx.response().headers().get("server") {
                let _ = self.0.set(s.to_string());
            }
        }
        Ok(())
    }
}
