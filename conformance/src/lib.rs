//! `quire-conformance`: suites any blob store must pass.
