//! What applying a slot costs the CPU: the state transition every writer's committer runs
//! once per member and every replica (the store's own compactor included) runs again per slot.
//!
//! The world holds 64 directories of 1,500 documents each (96,000 in all); the slot creates
//! one new document in each directory, as 64 writers each adding to their own directory do.
//! `apply_shared` applies it to a state another holder shares (a committer's tail, a replica's
//! state after a snapshot), so every node it touches is copied, and drops the result, as the
//! committer does with the states it replaces.

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use quire_log::testing::{WORLD, commit, publish};
use quire_log::{EncodedSlot, WorldState};

const DIRECTORIES: usize = 64;
const PER_DIRECTORY: usize = 1_500;

fn world() -> (WorldState, EncodedSlot) {
    let mut state = WorldState::genesis(WORLD);
    let mut bases: Vec<Bytes> = Vec::new();
    let body = "x".repeat(300);
    let slot_of = |n: usize| -> Vec<_> {
        (0..DIRECTORIES)
            .map(|d| publish(&format!("/peers/writer-{d:02}/doc-{n:06}.md"), &body))
            .collect()
    };
    for n in 0..PER_DIRECTORY {
        commit(&mut state, &slot_of(n), true, &mut bases);
        // Only appends read earlier versions' bytes, and there are none.
        bases.clear();
    }
    let mut next = state.clone();
    let slot = commit(&mut next, &slot_of(PER_DIRECTORY), true, &mut bases);
    (state, slot)
}

fn bench(c: &mut Criterion) {
    let (state, slot) = world();
    let mut group = c.benchmark_group("state");
    group.throughput(Throughput::Elements(DIRECTORIES as u64));
    group.bench_function("apply_shared", |b| {
        b.iter(|| state.apply(&slot).expect("the slot follows the state"));
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
