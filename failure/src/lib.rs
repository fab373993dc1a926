//! The one error shape of every Quire layer: the operation that failed, the key it failed on
//! (an object key, a document path, a file, a world), one kind saying what the caller may
//! conclude, a detail for people, an optional cause, and whatever extra a layer carries (the
//! document as it stands for a conflict, what the object store reported).
//!
//! Each crate owns its operations and kinds; this crate owns how they are held and printed,
//! so every message reads the same: `<subject> <op> "<key>": <kind>[: <detail>]`.
//!
//! | item | what it gives |
//! | --- | --- |
//! | [`Failure`] | the shape: accessors, cause, extra, Display, `std::error::Error` |
//! | [`Subject`] | the word a crate's messages open with (`blob`, `log`, `tokens`, …) |
//! | [`names!`] | an enum of operations or kinds with `name()` and `Display` |
//! | [`error_type!`] | a crate's own `Error` newtype over a [`Failure`], for crate-specific methods |
//! | [`FileKind`] | the kinds of a failure to load a file: invalid or unreadable |
//!
//! Invariants: two failures are equal when they say the same thing (operation, key, kind,
//! detail, extra); causes are not compared. Cloning shares the cause, so one failure can
//! answer several waiters.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

/// An underlying cause, as callers hand it over.
pub type Source = Box<dyn StdError + Send + Sync + 'static>;

/// What a crate's failure messages open with.
pub trait Subject {
    const SUBJECT: &'static str;
}

/// `<subject> <op> "<key>": <kind>[: <detail>]`, with an optional cause and a layer's extra.
#[derive(Clone)]
pub struct Failure<Op, Kind, Extra = ()> {
    op: Op,
    key: String,
    kind: Kind,
    detail: String,
    extra: Extra,
    source: Option<Arc<dyn StdError + Send + Sync + 'static>>,
}

impl<Op: Copy, Kind: Copy, Extra: Default> Failure<Op, Kind, Extra> {
    /// A failure of `kind` for `op` on `key`, with a detail for people (may be empty).
    pub fn new(op: Op, key: impl Into<String>, kind: Kind, detail: impl Into<String>) -> Self {
        Failure {
            op,
            key: key.into(),
            kind,
            detail: detail.into(),
            extra: Extra::default(),
            source: None,
        }
    }
}

impl<Op: Copy, Kind: Copy, Extra> Failure<Op, Kind, Extra> {
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

    /// What the layer carries beyond the shape.
    pub fn extra(&self) -> &Extra {
        &self.extra
    }

    pub fn extra_mut(&mut self) -> &mut Extra {
        &mut self.extra
    }

    /// Attaches the underlying cause.
    pub fn with_source(mut self, source: impl Into<Source>) -> Self {
        self.source = Some(Arc::from(source.into()));
        self
    }

    /// The same failure with another kind (for layers that learn more, such as a mutation
    /// that failed after it was sent and so became ambiguous).
    pub fn with_kind(mut self, kind: Kind) -> Self {
        self.kind = kind;
        self
    }

    /// The underlying cause, if one was attached.
    pub fn cause(&self) -> Option<&(dyn StdError + Send + Sync + 'static)> {
        self.source.as_deref()
    }
}

impl<Op: PartialEq, Kind: PartialEq, Extra: PartialEq> PartialEq for Failure<Op, Kind, Extra> {
    fn eq(&self, other: &Self) -> bool {
        (&self.op, &self.key, &self.kind, &self.detail, &self.extra)
            == (
                &other.op,
                &other.key,
                &other.kind,
                &other.detail,
                &other.extra,
            )
    }
}

impl<Op: Eq, Kind: Eq, Extra: Eq> Eq for Failure<Op, Kind, Extra> {}

impl<Op: fmt::Debug, Kind: fmt::Debug, Extra: fmt::Debug> fmt::Debug for Failure<Op, Kind, Extra> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Failure")
            .field("op", &self.op)
            .field("key", &self.key)
            .field("kind", &self.kind)
            .field("detail", &self.detail)
            .field("extra", &self.extra)
            .field("source", &self.source)
            .finish()
    }
}

impl<Op: Subject + fmt::Display, Kind: fmt::Display, Extra> fmt::Display
    for Failure<Op, Kind, Extra>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {:?}: {}",
            Op::SUBJECT,
            self.op,
            self.key,
            self.kind
        )?;
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

impl<Op, Kind, Extra> StdError for Failure<Op, Kind, Extra>
where
    Op: Subject + fmt::Display + fmt::Debug,
    Kind: fmt::Display + fmt::Debug,
    Extra: fmt::Debug,
{
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn StdError + 'static))
    }
}

/// Why a file could not be used: the kinds shared by every loader of a file (tokens,
/// configuration, certificates).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FileKind {
    /// The file breaks its format or its rules; the detail says where.
    Invalid,
    /// The file (or a source it needs, such as randomness) could not be read or written.
    Io,
}

impl FileKind {
    pub fn name(self) -> &'static str {
        match self {
            FileKind::Invalid => "invalid",
            FileKind::Io => "i/o failure",
        }
    }
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An enum of operations or kinds, each variant with the name messages and metrics spell:
/// derives `Clone, Copy, Debug, PartialEq, Eq, Hash` and gives `name()` and `Display`.
///
/// ```
/// quire_failure::names! {
///     /// What a loader does.
///     pub enum Op {
///         /// Reading the file.
///         Load => "load",
///         Parse => "parse",
///     }
/// }
/// assert_eq!(Op::Load.to_string(), "load");
/// ```
#[macro_export]
macro_rules! names {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $($(#[$variant_meta:meta])* $variant:ident => $text:literal),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $($(#[$variant_meta])* $variant),*
        }

        impl $name {
            /// The name messages and metrics spell.
            $vis fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text),*
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

/// A crate's own error type: a newtype over a [`Failure`] that reads like it (through
/// `Deref`), prints like it, converts from it, and leaves room for the crate's own methods.
/// Gives `new`, `with_source`, `with_kind` and `into_failure`.
///
/// ```
/// quire_failure::names! { pub enum Op { Get => "get" } }
/// quire_failure::names! { pub enum ErrorKind { NotFound => "not found" } }
/// impl quire_failure::Subject for Op {
///     const SUBJECT: &'static str = "blob";
/// }
/// quire_failure::error_type! {
///     /// A failed blob operation.
///     #[derive(Clone, Debug, PartialEq)]
///     pub struct Error(Op, ErrorKind);
/// }
/// let err = Error::new(Op::Get, "k", ErrorKind::NotFound, "");
/// assert_eq!(err.to_string(), "blob get \"k\": not found");
/// assert_eq!(err.kind(), ErrorKind::NotFound);
/// ```
#[macro_export]
macro_rules! error_type {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident($op:ty, $kind:ty $(, $extra:ty)?);
    ) => {
        $(#[$meta])*
        $vis struct $name($crate::Failure<$op, $kind $(, $extra)?>);

        impl $name {
            /// An error of `kind` for `op` on `key`, with a detail for people (may be empty).
            $vis fn new(
                op: $op,
                key: impl Into<String>,
                kind: $kind,
                detail: impl Into<String>,
            ) -> Self {
                $name($crate::Failure::new(op, key, kind, detail))
            }

            /// Attaches the underlying cause.
            $vis fn with_source(self, source: impl Into<$crate::Source>) -> Self {
                $name(self.0.with_source(source))
            }

            /// The same failure with another kind.
            $vis fn with_kind(self, kind: $kind) -> Self {
                $name(self.0.with_kind(kind))
            }

            /// The shape underneath.
            $vis fn into_failure(self) -> $crate::Failure<$op, $kind $(, $extra)?> {
                self.0
            }
        }

        impl ::std::ops::Deref for $name {
            type Target = $crate::Failure<$op, $kind $(, $extra)?>;
            fn deref(&self) -> &Self::Target {
                &self.0
            }
        }

        impl ::std::ops::DerefMut for $name {
            fn deref_mut(&mut self) -> &mut Self::Target {
                &mut self.0
            }
        }

        impl From<$crate::Failure<$op, $kind $(, $extra)?>> for $name {
            fn from(failure: $crate::Failure<$op, $kind $(, $extra)?>) -> Self {
                $name(failure)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                ::std::fmt::Display::fmt(&self.0, f)
            }
        }

        impl ::std::error::Error for $name {
            fn source(&self) -> Option<&(dyn ::std::error::Error + 'static)> {
                ::std::error::Error::source(&self.0)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    names! {
        enum Op {
            Load => "load",
        }
    }

    impl Subject for Op {
        const SUBJECT: &'static str = "tokens";
    }

    #[derive(Clone, Debug, Default, PartialEq)]
    struct Current(Option<u64>);

    error_type! {
        #[derive(Clone, Debug, PartialEq)]
        struct Error(Op, FileKind, Current);
    }

    #[test]
    fn the_message_names_subject_op_key_kind_and_detail() {
        let failure: Failure<Op, FileKind> = Failure::new(
            Op::Load,
            "/etc/tokens.toml",
            FileKind::Invalid,
            "line 3: bad hash",
        );
        assert_eq!(
            failure.to_string(),
            "tokens load \"/etc/tokens.toml\": invalid: line 3: bad hash"
        );
        assert_eq!(
            (
                failure.op(),
                failure.key(),
                failure.kind(),
                failure.detail()
            ),
            (
                Op::Load,
                "/etc/tokens.toml",
                FileKind::Invalid,
                "line 3: bad hash"
            )
        );
        let bare: Failure<Op, FileKind> = Failure::new(Op::Load, "t", FileKind::Io, "");
        assert_eq!(bare.to_string(), "tokens load \"t\": i/o failure");
    }

    #[test]
    fn the_cause_is_kept_shared_by_clones_and_not_compared() {
        let io = std::io::Error::other("disk gone");
        let err = Error::new(Op::Load, "t", FileKind::Io, "read").with_source(io);
        let copy = err.clone();
        assert_eq!(
            StdError::source(&copy).map(|s| s.to_string()),
            Some("disk gone".to_owned())
        );
        assert_eq!(err, Error::new(Op::Load, "t", FileKind::Io, "read"));
        assert_ne!(err, Error::new(Op::Load, "t", FileKind::Invalid, "read"));
    }

    #[test]
    fn a_newtype_carries_its_extra_and_changes_kind() {
        let mut err = Error::new(Op::Load, "t", FileKind::Io, "x");
        err.extra_mut().0 = Some(7);
        let err = err.with_kind(FileKind::Invalid);
        assert_eq!(
            (err.kind(), err.extra()),
            (FileKind::Invalid, &Current(Some(7)))
        );
        assert_eq!(err.into_failure().extra(), &Current(Some(7)));
    }
}
