//! The client's tests over the mock in one binary (each test binary is a link of the whole
//! HTTP stack, seconds of CI on 2 cores): the conformance
//! suite (conformance/) over the mock, and the retry layer. The same suite over a real
//! SeaweedFS is its own binary (../conformance_seaweedfs), because it sets environment
//! variables, which must race no other test's thread.

mod conformance;
mod mock_conformance;
mod retry;
