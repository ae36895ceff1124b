//! Running the matrix: every workload, size, thread count and variant, measured once.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::checkpoints::CheckpointCells;
use crate::contention::{measure_contention, oversubscribed, ContentionJob};
use crate::memory::{memory_of, trainer_pattern_live, MemorySummary};
use mvtensor_bench::checkpoints::{self, CheckpointVariant};
use mvtensor_bench::contention::{self, Job};
use mvtensor_bench::costs::{self, CostPlan, Costs};
use mvtensor_bench::embedding::{self, EmbeddingVariant, Indices};
use mvtensor_bench::optimizer::{OptimizerVariant, OPTIMIZER_THREADS};
use mvtensor_bench::sections::{Body, SectionRun, SectionVariant};
use mvtensor_bench::train::{self, TrainRun, TrainVariant, TRAIN_THREADS};
use mvtensor_bench::wine;
use mvtensor_bench::workloads::{bandwidth, Dense, DenseRun, Latency, LatencyRun};
use mvtensor_bench::{median, Budget, Variant, SIZES, THREADS};

/// How long each measurement runs, at `--scale 1`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// One run of one dense cell (workloads 1 to 3); each cell runs `rounds` times.
    pub(crate) dense: Duration,
    pub(crate) rounds: usize,
    /// One round of a read-latency cell; `latency_rounds` rounds are merged.
    pub(crate) latency: Duration,
    pub(crate) latency_rounds: usize,
    /// One run of a critical-section cell; `rounds` runs per cell.
    pub(crate) section: Duration,
    /// The write-heavy run of each variant's memory measurement (its own process).
    pub(crate) memory: Duration,
    /// One bandwidth measurement.
    pub(crate) bandwidth: Duration,
    /// The cost-per-operation table (a few seconds at scale 1).
    pub(crate) costs: CostPlan,
    /// The checkpoint workload's time per cell (each variant without and with the
    /// checkpointer), in `CHECKPOINT_ROUNDS` rounds.
    pub(crate) checkpoint: Duration,
    /// Steps of one run of the wine trainer: long enough that the start (threads, pools,
    /// caches) and short spells of machine noise do not decide a cell.
    pub(crate) train_steps: usize,
    /// Runs of each wine-trainer cell: enough that one noisy run does not decide the median.
    pub(crate) train_rounds: usize,
    /// One run of one embedding cell (workload 10); `rounds` runs per cell.
    pub(crate) embedding: Duration,
    /// The contention job of the goal: no more threads than cores (`--bin contention`'s
    /// default).
    pub(crate) contention: Job,
    /// The largest default contention job where it is more threads than cores: measured and
    /// reported beside the goal, not a goal.
    pub(crate) contention_oversubscribed: Option<Job>,
    /// Rounds of each contention job, each variant once a round (`--bin contention`'s
    /// default).
    pub(crate) contention_rounds: usize,
}

/// Rounds of the checkpoint workload; a cell merges them.
pub(crate) const CHECKPOINT_ROUNDS: u32 = 4;

impl Plan {
    pub(crate) fn scaled(scale: f64, cores: usize) -> Plan {
        let ms = |base: f64| Duration::from_secs_f64(base * scale / 1000.0);
        Plan {
            dense: ms(200.0),
            rounds: 3,
            latency: ms(500.0),
            latency_rounds: 2,
            section: ms(100.0),
            memory: ms(1500.0),
            bandwidth: ms(250.0),
            costs: CostPlan { rounds: 11, scale },
            // At least three checkpoint intervals a round, so that every round saves files.
            checkpoint: ms(2000.0).max(3 * CHECKPOINT_ROUNDS * checkpoints::INTERVAL),
            train_steps: (15000.0 * scale) as usize,
            train_rounds: 7,
            embedding: ms(200.0),
            contention: Job::for_cores(cores),
            contention_oversubscribed: oversubscribed(cores),
            contention_rounds: ((contention::ROUNDS as f64 * scale).round() as usize).max(1),
        }
    }
}

/// Read-latency configurations: (writers, readers).
pub(crate) const LATENCY_CONFIGS: [(usize, usize); 3] = [(1, 1), (2, 2), (4, 4)];
/// Workload 4 and 6 run on a tensor of this many f32 (4 MiB).
pub(crate) const BIG: usize = 1 << 20;
/// Threads of the memory measurement (workload 2 at the goal's thread count).
pub(crate) const MEMORY_THREADS: usize = 4;

/// Steps of the trainer pattern, all threads together (as `tests/trainer_memory.rs`).
pub(crate) const TRAINER_PATTERN_STEPS: usize = 100_000;

/// One read-latency configuration's figures, in `Variant::ALL` order.
pub(crate) type LatencyCells = Vec<(Variant, Latency)>;

/// Everything one run measured.
pub(crate) struct Results {
    /// GB/s of `c = a + b`, by (elements, threads).
    pub(crate) bandwidth: HashMap<(usize, usize), f64>,
    /// Median ops/s by (workload, elements, threads, variant).
    pub(crate) dense: HashMap<(Dense, usize, usize, Variant), f64>,
    /// mvtensor's deltas per combined pass, by (workload, elements, threads), last round.
    pub(crate) batch: HashMap<(Dense, usize, usize), f64>,
    /// By (writers, readers), in `Variant::ALL` order.
    pub(crate) latency: Vec<((usize, usize), LatencyCells)>,
    /// Median executions/s by (body, threads, variant).
    pub(crate) sections: HashMap<(Body, usize, SectionVariant), f64>,
    /// Median Adam steps/s by (threads, variant).
    pub(crate) optimizer: HashMap<(usize, OptimizerVariant), f64>,
    /// By (elements, variant): every variant at 1M, mvtensor also at the smaller sizes.
    pub(crate) memory: Vec<(usize, Variant, MemorySummary)>,
    /// The trainer pattern: live versions after a step, median and max.
    pub(crate) trainer_live: (usize, usize),
    /// The contention job of the goal (`crate::contention`).
    pub(crate) contention: ContentionJob,
    /// The largest default contention job where it is more threads than cores: not a goal.
    pub(crate) contention_oversubscribed: Option<ContentionJob>,
    /// CPU ns per operation beside the same run's floor.
    pub(crate) costs: Costs,
    /// Trainer step latency without and with a checkpointer, by variant.
    pub(crate) checkpoints: HashMap<CheckpointVariant, CheckpointCells>,
    /// The wine trainer: median steps/s (and the last round's loss and loss curve) by
    /// (threads, variant).
    pub(crate) train: HashMap<(usize, TrainVariant), TrainRun>,
    /// Workload 10: median updates/s and lost fraction by (indices, threads, variant).
    pub(crate) embedding: HashMap<(Indices, usize, EmbeddingVariant), (f64, f64)>,
    /// Workload 10: median CPU per update and per 32-row gather, by (indices, variant).
    pub(crate) embedding_costs: HashMap<(Indices, EmbeddingVariant), (Duration, Duration)>,
}

fn progress(started: Instant, what: &str) {
    eprintln!("[{:>5.1}s] {what}", started.elapsed().as_secs_f64());
}

pub(crate) fn measure(plan: Plan, started: Instant) -> Results {
    // Warm up: the allocator and the caches.
    for variant in Variant::ALL {
        variant.visit(DenseRun {
            workload: Dense::WriteHeavy,
            n: BIG,
            threads: 2,
            budget: Budget::Time(Duration::from_millis(30)),
        });
    }

    progress(started, "bandwidth baseline");
    let mut bw = HashMap::new();
    for n in SIZES {
        for threads in [1, 2] {
            bw.insert((n, threads), bandwidth(n, threads, plan.bandwidth));
        }
    }

    progress(started, "cost per operation");
    let costs = costs::measure(plan.costs);

    let mut dense = HashMap::new();
    let mut batch = HashMap::new();
    for workload in Dense::ALL {
        progress(started, workload.key());
        for n in SIZES {
            for threads in THREADS {
                let mut runs: HashMap<Variant, Vec<f64>> = HashMap::new();
                for round in 0..plan.rounds {
                    for variant in rotated(&Variant::ALL, round) {
                        let t = variant.visit(DenseRun {
                            workload,
                            n,
                            threads,
                            budget: Budget::Time(plan.dense),
                        });
                        runs.entry(variant).or_default().push(t.per_s());
                        if let Some(b) = t.mean_batch {
                            batch.insert((workload, n, threads), b);
                        }
                    }
                }
                for (variant, xs) in runs {
                    dense.insert((workload, n, threads, variant), median(xs));
                }
            }
        }
    }

    progress(started, "read latency under writes");
    let mut latency = Vec::new();
    for (writers, readers) in LATENCY_CONFIGS {
        let mut merged: Vec<(Variant, Latency)> = Variant::ALL
            .iter()
            .map(|&v| (v, Latency::empty()))
            .collect();
        for round in 0..plan.latency_rounds {
            for variant in rotated(&Variant::ALL, round) {
                let l = variant.visit(LatencyRun {
                    n: BIG,
                    writers,
                    readers,
                    budget: Budget::Time(plan.latency),
                });
                let slot = merged.iter_mut().find(|(v, _)| *v == variant).unwrap();
                slot.1.merge(&l, plan.latency_rounds as f64);
            }
        }
        latency.push(((writers, readers), merged));
    }

    progress(started, "critical sections");
    let mut sections = HashMap::new();
    for body in Body::ALL {
        let variants: Vec<SectionVariant> = SectionVariant::ALL
            .into_iter()
            .filter(|v| v.runs(body))
            .collect();
        for threads in THREADS {
            let mut runs: HashMap<SectionVariant, Vec<f64>> = HashMap::new();
            for round in 0..plan.rounds {
                for variant in rotated(&variants, round) {
                    let t = variant.visit(SectionRun {
                        body,
                        threads,
                        budget: Budget::Time(plan.section),
                    });
                    runs.entry(variant).or_default().push(t.per_s());
                }
            }
            for (variant, xs) in runs {
                sections.insert((body, threads, variant), median(xs));
            }
        }
    }

    progress(started, "optimizer steps");
    let mut optimizer = HashMap::new();
    for threads in OPTIMIZER_THREADS {
        let mut runs: HashMap<OptimizerVariant, Vec<f64>> = HashMap::new();
        for round in 0..plan.rounds {
            for variant in rotated(&OptimizerVariant::ALL, round) {
                let t = variant.run(threads, Budget::Time(plan.section));
                runs.entry(variant).or_default().push(t.per_s());
            }
        }
        for (variant, xs) in runs {
            optimizer.insert((threads, variant), median(xs));
        }
    }

    progress(started, "checkpoints while training");
    let dir = std::env::temp_dir().join(format!("mvtensor-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    // Each cell is `CHECKPOINT_ROUNDS` runs merged, every variant without and with the
    // checkpointer in turn (which goes first alternates), so that a slow stretch of this
    // shared machine lands on both sides of the ratio instead of on one run, where it
    // could decide the goal alone.
    let segment = plan.checkpoint / CHECKPOINT_ROUNDS;
    let mut checkpoints: HashMap<CheckpointVariant, CheckpointCells> = CheckpointVariant::ALL
        .into_iter()
        .map(|v| (v, CheckpointCells::default()))
        .collect();
    for round in 0..CHECKPOINT_ROUNDS {
        for v in CheckpointVariant::ALL {
            let cells = checkpoints.get_mut(&v).expect("every variant");
            let order = if round % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for with in order {
                let run = checkpoints::run(v, with, segment, &dir);
                if with {
                    cells.with.merge(run);
                } else {
                    cells.without.merge(run);
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);

    progress(started, "a trainer on real data");
    let wines = wine::wines();
    let mut train = HashMap::new();
    for threads in TRAIN_THREADS {
        let mut runs: HashMap<TrainVariant, Vec<TrainRun>> = HashMap::new();
        for round in 0..plan.train_rounds {
            for variant in rotated(&TrainVariant::ALL, round) {
                let r = train::run(variant, threads, plan.train_steps, &wines);
                runs.entry(variant).or_default().push(r);
            }
        }
        for (variant, mut rs) in runs {
            // The run of median steps/s, curve and all, so that its time to the target
            // loss goes with the steps/s shown, not with another run's.
            rs.sort_by(|a, b| a.steps_per_s.total_cmp(&b.steps_per_s));
            let steps_per_s = median(rs.iter().map(|r| r.steps_per_s).collect());
            let mid = rs.swap_remove(rs.len() / 2);
            let run = TrainRun {
                steps_per_s,
                loss: mid.loss,
                curve: mid.curve,
            };
            train.insert((threads, variant), run);
        }
    }

    progress(started, "sparse updates of an embedding table");
    let mut sparse = HashMap::new();
    let mut sparse_costs = HashMap::new();
    for indices in Indices::ALL {
        let mut costs: HashMap<EmbeddingVariant, Vec<(Duration, Duration)>> = HashMap::new();
        for round in 0..plan.rounds {
            for variant in rotated(&EmbeddingVariant::ALL, round) {
                let ops = (2048.0 * plan.costs.scale).max(200.0) as usize;
                costs
                    .entry(variant)
                    .or_default()
                    .push(embedding::cpu_costs(variant, indices, ops));
            }
        }
        for (variant, xs) in costs {
            let update = median(xs.iter().map(|c| c.0.as_secs_f64()).collect());
            let gather = median(xs.iter().map(|c| c.1.as_secs_f64()).collect());
            sparse_costs.insert(
                (indices, variant),
                (
                    Duration::from_secs_f64(update),
                    Duration::from_secs_f64(gather),
                ),
            );
        }
        for threads in THREADS {
            let mut runs: HashMap<EmbeddingVariant, Vec<(f64, f64)>> = HashMap::new();
            for round in 0..plan.rounds {
                for variant in rotated(&EmbeddingVariant::ALL, round) {
                    let r = embedding::run(variant, indices, threads, Budget::Time(plan.embedding));
                    runs.entry(variant)
                        .or_default()
                        .push((r.throughput.per_s(), r.lost));
                }
            }
            for (variant, xs) in runs {
                let rate = median(xs.iter().map(|x| x.0).collect());
                let lost = median(xs.iter().map(|x| x.1).collect());
                sparse.insert((indices, threads, variant), (rate, lost));
            }
        }
    }

    progress(started, "the contention job");
    let contention = measure_contention(plan.contention, plan.contention_rounds);
    let contention_oversubscribed = plan
        .contention_oversubscribed
        .map(|job| measure_contention(job, plan.contention_rounds));

    progress(started, "memory (one process per variant and size)");
    let mut memory = Vec::new();
    for n in SIZES {
        for v in Variant::ALL {
            if n == BIG || v == Variant::Mvtensor {
                memory.push((n, v, memory_of(v, n, plan.memory)));
            }
        }
    }
    progress(started, "memory: the trainer pattern");
    let trainer_live = trainer_pattern_live(MEMORY_THREADS, TRAINER_PATTERN_STEPS);

    Results {
        bandwidth: bw,
        dense,
        batch,
        latency,
        sections,
        optimizer,
        memory,
        trainer_live,
        contention,
        contention_oversubscribed,
        costs,
        checkpoints,
        train,
        embedding: sparse,
        embedding_costs: sparse_costs,
    }
}

/// `items`, starting at `round` (so that no variant always runs first).
fn rotated<T: Copy>(items: &[T], round: usize) -> Vec<T> {
    let k = round % items.len();
    items[k..].iter().chain(&items[..k]).copied().collect()
}
