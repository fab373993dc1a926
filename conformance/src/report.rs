//! How a suite reports: one [`Outcome`] per case, in suite order, and the one error a case
//! returns ([`CaseError`]: a failure, or a gap the target cannot show).

/// How one case ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    Failed(String),
    /// The target cannot show this behaviour; the reason says why.
    Gap(String),
}

impl Outcome {
    /// A short label for tables.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Passed => "pass",
            Outcome::Failed(_) => "FAIL",
            Outcome::Gap(_) => "emulator gap",
        }
    }
}

/// Why a case did not pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaseError {
    /// The target broke the rule the case checks.
    Failed(String),
    /// The target cannot show the behaviour the case checks (an emulator's limit).
    Gap(String),
}

/// A failure's reason, as the checks (`ensure`, `ok`, …) spell it, so `?` carries it.
impl From<String> for CaseError {
    fn from(why: String) -> Self {
        CaseError::Failed(why)
    }
}

impl From<&str> for CaseError {
    fn from(why: &str) -> Self {
        CaseError::Failed(why.to_owned())
    }
}

/// What a case returns.
pub type CaseResult = Result<(), CaseError>;

impl From<CaseResult> for Outcome {
    fn from(result: CaseResult) -> Self {
        match result {
            Ok(()) => Outcome::Passed,
            Err(CaseError::Failed(why)) => Outcome::Failed(why),
            Err(CaseError::Gap(why)) => Outcome::Gap(why),
        }
    }
}

/// Every case's outcome, in suite order.
#[derive(Clone, Debug)]
pub struct SuiteReport {
    pub outcomes: Vec<(&'static str, Outcome)>,
}

impl SuiteReport {
    pub fn failures(&self) -> Vec<String> {
        self.outcomes
            .iter()
            .filter_map(|(case, outcome)| match outcome {
                Outcome::Failed(why) => Some(format!("{case}: {why}")),
                _ => None,
            })
            .collect()
    }

    /// Panics with every failure's reason when any case failed (for `#[test]`s).
    pub fn assert_passed(&self) {
        let failures = self.failures();
        assert!(
            failures.is_empty(),
            "suite failures:\n  {}",
            failures.join("\n  ")
        );
    }

    /// Panics unless every case of `names` ran, in that order, and none failed.
    pub fn assert_complete(&self, names: &[&str]) {
        self.assert_passed();
        let ran: Vec<&str> = self.outcomes.iter().map(|(case, _)| *case).collect();
        assert_eq!(ran, names, "the suite did not run exactly its cases");
    }
}
