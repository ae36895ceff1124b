//! mvtensor against mutex variants (std and parking_lot `Mutex`/`RwLock`, an arc-swap RCU
//! cell), criterion edition: the detailed runs behind `docs/benchmarks.md`. The workloads
//! and variants are the report's own (the harness, `src/`), only the timing differs.
//!
//! ```text
//! cargo bench -p mvtensor-bench --bench variants                            # everything (long)
//! cargo bench -p mvtensor-bench --bench variants -- write_heavy/1M          # one workload and size
//! cargo bench -p mvtensor-bench --bench variants -- 'read_mostly/64K/.*/4'  # one cell, every variant
//! ```
//!
//! Benchmark ids are `workload/size/variant/threads`. Throughput is in operations of all
//! threads together (criterion's "elements"): reads + writes, updates, steps, executions.
//! Read latency under writes (workload 4) is timed here as the mean of `read()` + sum while
//! writers run; its percentiles are in the report (`cargo run --release -p
//! mvtensor-bench --bin report`), as is memory (workload 6).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use mvtensor_bench::optimizer::{OptimizerVariant, OPTIMIZER_THREADS};
use mvtensor_bench::sections::{Body, SectionRun, SectionVariant};
use mvtensor_bench::workloads::{Dense, DenseRun, LatencyRun};
use mvtensor_bench::{chunked, size_label, Budget, Variant, SIZES, THREADS};

fn configure(group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
}

fn dense(c: &mut Criterion) {
    for workload in Dense::ALL {
        for n in SIZES {
            let mut group = c.benchmark_group(format!("{}/{}", workload.key(), size_label(n)));
            configure(&mut group);
            for variant in Variant::ALL {
                for threads in THREADS {
                    group.throughput(Throughput::Elements(threads as u64));
                    let id = BenchmarkId::new(variant.key(), threads);
                    group.bench_function(id, |b| {
                        // One criterion iteration = one operation on every thread.
                        b.iter_custom(|iters| {
                            chunked(iters, workload.cap(threads), |ops| {
                                let run = DenseRun {
                                    workload,
                                    n,
                                    threads,
                                    budget: Budget::Ops(ops),
                                };
                                variant.visit(run).elapsed
                            })
                        })
                    });
                }
            }
            group.finish();
        }
    }
}

fn read_latency(c: &mut Criterion) {
    let n = 1 << 20;
    let mut group = c.benchmark_group(format!("read_latency/{}", size_label(n)));
    configure(&mut group);
    for variant in Variant::ALL {
        for writers in [1, 2, 4] {
            // `writers` writers and as many readers; one iteration = one read per reader
            // (and one update per writer), so time per iteration ~ read latency.
            let id = BenchmarkId::new(variant.key(), format!("{writers}w{writers}r"));
            group.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    let cap = mvtensor_bench::EXACT_ADDS / writers as u64;
                    chunked(iters, cap, |ops| {
                        let run = LatencyRun {
                            n,
                            writers,
                            readers: writers,
                            budget: Budget::Ops(ops),
                        };
                        let mean_ns = variant.visit(run).hist.mean();
                        Duration::from_nanos((mean_ns * ops as f64) as u64)
                    })
                })
            });
        }
    }
    group.finish();
}

fn sections(c: &mut Criterion) {
    for body in Body::ALL {
        let mut group = c.benchmark_group(format!("critical_section/{}", body.key()));
        configure(&mut group);
        for variant in SectionVariant::ALL.into_iter().filter(|v| v.runs(body)) {
            for threads in THREADS {
                group.throughput(Throughput::Elements(threads as u64));
                let id = BenchmarkId::new(variant.name().replace(' ', "_"), threads);
                group.bench_function(id, |b| {
                    b.iter_custom(|iters| {
                        let run = SectionRun {
                            body,
                            threads,
                            budget: Budget::Ops(iters),
                        };
                        variant.visit(run).elapsed
                    })
                });
            }
        }
        group.finish();
    }
}

/// Workload 7: Adam steps over a small model, 1 to 4 threads.
fn optimizer(c: &mut Criterion) {
    let mut group = c.benchmark_group("adam/1K");
    configure(&mut group);
    for variant in OptimizerVariant::ALL {
        for threads in OPTIMIZER_THREADS {
            group.throughput(Throughput::Elements(threads as u64));
            let id = BenchmarkId::new(variant.name().replace(' ', "_"), threads);
            group.bench_function(id, |b| {
                b.iter_custom(|iters| variant.run(threads, Budget::Ops(iters)).elapsed)
            });
        }
    }
    group.finish();
}

criterion_group!(benches, dense, read_latency, sections, optimizer);
criterion_main!(benches);
