//! What the test suites of the flowfs crates share and the binary never links: the
//! SeaweedFS harness (`weed`) Azurite's (`azurite`) and fake-gcs-server's (`fakegcs`), used by the client's conformance
//! runs (flowfs-client/tests/conformance_seaweedfs, conformance_azurite, conformance_fakegcs) and the core's
//! shared bodies over a real server (flowfs-fs/tests/fs_on_seaweedfs). A dev-dependency
//! of both, so that no test includes another crate's source by `#[path]`.

pub mod azurite;
mod emulator;
pub mod fakegcs;
mod group;
pub mod weed;

/// Runs `body` to its end on a runtime of one thread, as a test over a real server does
/// when it changes the environment (credentials): nothing else runs to read it meanwhile.
pub fn on_one_thread<F: std::future::Future>(body: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(body)
}
