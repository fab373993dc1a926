//! The group committer (not built yet).
