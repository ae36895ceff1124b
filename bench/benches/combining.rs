//! Combined dense updates vs a mutex, in the same run: 4 threads add deltas to a 1M-element
//! f32 tensor. Prints updates/s for each, and the ratio (goal: mvtensor >= 1.5x the mutex).
//!
//! `cargo bench -p mvtensor-bench --bench combining` (`-- --quick` for a short run). Plain `harness = false`
//! so that both variants run interleaved, round after round, on the same noisy machine.

use std::sync::{Barrier, Mutex};
use std::time::Instant;

use mvtensor::Variable;
use mvtensor_bench::median;
use ndarray::{ArrayD, IxDyn};

const ELEMENTS: usize = 1 << 20;
const THREADS: usize = 4;

/// Runs `update` from `THREADS` threads, `per_thread` times each; returns updates per second.
fn rate(per_thread: usize, update: impl Fn(&ArrayD<f32>) + Sync) -> f64 {
    let start = Barrier::new(THREADS + 1);
    let elapsed = std::thread::scope(|s| {
        for t in 0..THREADS {
            let (start, update) = (&start, &update);
            s.spawn(move || {
                let delta = ArrayD::from_elem(IxDyn(&[ELEMENTS]), t as f32 + 1.0);
                start.wait();
                for _ in 0..per_thread {
                    update(&delta);
                }
            });
        }
        start.wait();
        let t0 = Instant::now();
        // The scope joins every thread before returning.
        t0
    })
    .elapsed();
    (THREADS * per_thread) as f64 / elapsed.as_secs_f64()
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (rounds, per_thread) = if quick { (3, 25) } else { (7, 100) };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("combining: {THREADS} threads x {per_thread} assign_add of {ELEMENTS} f32, {rounds} rounds, {cores} cores");

    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let mut last_stats = None;
    for _ in 0..rounds {
        let v = Variable::new(ArrayD::<f32>::zeros(IxDyn(&[ELEMENTS])));
        ours.push(rate(per_thread, |d| {
            v.assign_add(d).unwrap();
        }));
        let expected: f32 = (1..=THREADS).map(|t| (t * per_thread) as f32).sum();
        assert!(
            v.read().iter().all(|&x| x == expected),
            "mvtensor lost an update"
        );
        last_stats = Some(v.stats());

        let m = Mutex::new(ArrayD::<f32>::zeros(IxDyn(&[ELEMENTS])));
        theirs.push(rate(per_thread, |d| {
            *m.lock().unwrap() += d;
        }));
        assert!(
            m.lock().unwrap().iter().all(|&x| x == expected),
            "mutex lost an update"
        );
    }
    let (ours, theirs) = (median(ours), median(theirs));
    let stats = last_stats.unwrap();
    println!(
        "  mvtensor           {ours:>10.0} updates/s  (mean batch {:.2}, max {}, {} CAS retries)",
        stats.combined_deltas as f64 / stats.combined_batches.max(1) as f64,
        stats.max_batch,
        stats.cas_retries
    );
    println!("  Mutex<ArrayD> (in place) {theirs:>10.0} updates/s");
    println!(
        "ratio mvtensor / mutex: {:.2}x (goal >= 1.50x) {}",
        ours / theirs,
        if ours / theirs >= 1.5 {
            "MET"
        } else {
            "MISSED"
        }
    );
}
