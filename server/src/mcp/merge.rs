//! The three-way merge a conflicting publish offers: the version the agent read (the
//! ancestor), the agent's body and the current version, merged line by line with `diffy`.
//! Where both sides changed the same lines the result holds git-style conflict markers,
//! `<<<<<<< ours` (the agent's lines), `=======`, `>>>>>>> theirs` (the current version's),
//! for the agent to resolve and publish again.

use diffy::{ConflictStyle, IncompleteHunkStyle, MergeOptions};

/// A merge result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Merged {
    pub text: String,
    /// Whether the text holds conflict markers.
    pub conflicts: bool,
}

/// Merges the agent's `ours` and the server's `theirs`, both edits of `ancestor`.
pub fn three_way(ancestor: &str, ours: &str, theirs: &str) -> Merged {
    let mut options = MergeOptions::new();
    options
        .set_conflict_style(ConflictStyle::Merge)
        .set_incomplete_hunk_style(IncompleteHunkStyle::Git);
    match options.merge(ancestor, ours, theirs) {
        Ok(text) => Merged {
            text,
            conflicts: false,
        },
        Err(text) => Merged {
            text,
            conflicts: true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_of_different_lines_merge_cleanly() {
        let base = "# Plan\none\ntwo\nthree\n";
        let ours = "# Plan\nONE\ntwo\nthree\n";
        let theirs = "# Plan\none\ntwo\nTHREE\n";
        assert_eq!(
            three_way(base, ours, theirs),
            Merged {
                text: "# Plan\nONE\ntwo\nTHREE\n".into(),
                conflicts: false
            }
        );
    }

    #[test]
    fn edits_of_the_same_line_carry_markers() {
        let merged = three_way("a\nb\nc\n", "a\nmine\nc\n", "a\nyours\nc\n");
        assert!(merged.conflicts);
        assert_eq!(
            merged.text,
            "a\n<<<<<<< ours\nmine\n=======\nyours\n>>>>>>> theirs\nc\n"
        );
    }
}
