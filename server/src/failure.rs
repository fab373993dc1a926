//! The one shape of the server's file, TLS, client and tool errors is the workspace's:
//! [`quire_failure::Failure`]. Each module owns its operations and kinds; its operation type
//! names the subject that opens every message (`tokens load "<file>": …`).

pub use quire_failure::{Failure, FileKind, Subject};
