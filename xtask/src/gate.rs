//! `cargo xtask gate`: the reliability gate at full size (ADR 0036: 250 writes/s for ten
//! simulated minutes on a million documents, under faults and crashes), in the release
//! profile. It is the ignored full case of `quire-conformance`'s `gate` test; the short form
//! runs with every `cargo test`.

use std::process::Command;

use anyhow::{Context, Result, bail};

/// What to run: `None` keeps the gate's own default.
#[derive(Clone, Debug, Default, clap::Args)]
pub(crate) struct GateArgs {
    /// Replays this seed exactly (default: QUIRE_SIM_SEED, else a new one; printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Documents in the world (default 1,000,000).
    #[arg(long)]
    pub docs: Option<u64>,
    /// Simulated minutes of load (default 10).
    #[arg(long)]
    pub minutes: Option<u64>,
}

pub(crate) fn run(args: &GateArgs) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command.current_dir(crate::servers::project_root()).args([
        "test",
        "--release",
        "-p",
        "quire-conformance",
        "--test",
        "gate",
        "--",
        "--ignored",
        "--exact",
        "the_full_gate_loses_no_acknowledged_write",
        "--nocapture",
    ]);
    for (name, value) in [
        ("QUIRE_SIM_SEED", args.seed),
        ("QUIRE_GATE_DOCS", args.docs),
        ("QUIRE_GATE_MINUTES", args.minutes),
    ] {
        if let Some(value) = value {
            command.env(name, value.to_string());
        }
    }
    let status = command.status().context("running the gate")?;
    if !status.success() {
        bail!("the gate failed: {status}");
    }
    Ok(())
}
