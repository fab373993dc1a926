//! The one shape of the server's file, TLS, client and tool errors: the operation that failed,
//! the key it failed on (a file, a URL, a world), one kind, and a detail for people. Each
//! module owns its operations and kinds; its operation type names the subject that opens
//! every message (`tokens load "<file>": …`).

use std::fmt;

/// What a module's failure messages open with.
pub trait Subject {
    const SUBJECT: &'static str;
}

/// `<subject> <op> "<key>": <kind>: <detail>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure<Op, Kind> {
    op: Op,
    key: String,
    kind: Kind,
    detail: String,
}

impl<Op: Copy, Kind: Copy> Failure<Op, Kind> {
    pub fn new(op: Op, key: impl Into<String>, kind: Kind, detail: impl Into<String>) -> Self {
        Failure {
            op,
            key: key.into(),
            kind,
            detail: detail.into(),
        }
    }

    pub fn op(&self) -> Op {
        self.op
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn detail(&self) -> &str {
        &self.detail
    }
}

impl<Op: Subject + fmt::Display, Kind: fmt::Display> fmt::Display for Failure<Op, Kind> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {:?}: {}: {}",
            Op::SUBJECT,
            self.op,
            self.key,
            self.kind,
            self.detail
        )
    }
}

impl<Op, Kind> std::error::Error for Failure<Op, Kind>
where
    Op: Subject + fmt::Display + fmt::Debug,
    Kind: fmt::Display + fmt::Debug,
{
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Load;

    impl fmt::Display for Load {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("load")
        }
    }

    impl Subject for Load {
        const SUBJECT: &'static str = "tokens";
    }

    #[test]
    fn the_message_names_subject_op_key_kind_and_detail() {
        let failure = Failure::new(Load, "/etc/tokens.toml", "parse", "line 3: bad hash");
        assert_eq!(
            failure.to_string(),
            "tokens load \"/etc/tokens.toml\": parse: line 3: bad hash"
        );
        assert_eq!(
            (
                failure.op(),
                failure.key(),
                failure.kind(),
                failure.detail()
            ),
            (Load, "/etc/tokens.toml", "parse", "line 3: bad hash")
        );
    }
}
