//! Workload 8 in the report: checkpoints while training, its table and its goal.

use std::fmt::Write;
use std::time::Duration;

use crate::format::latency;
use crate::goals::Goal;
use crate::report::Report;
use crate::run::CHECKPOINT_ROUNDS;
use mvtensor_bench::checkpoints::{CheckpointRun, CheckpointVariant, INTERVAL, TENSORS, TRAINERS};

/// The measurements of one variant: without and with the checkpointer.
#[derive(Debug, Clone, Default)]
pub(crate) struct CheckpointCells {
    pub(crate) without: CheckpointRun,
    pub(crate) with: CheckpointRun,
}

impl CheckpointCells {
    fn p(run: &CheckpointRun, q: f64) -> u64 {
        run.steps.value_at_quantile(q)
    }
    /// p99 step latency with checkpoints ÷ without.
    pub(crate) fn p99_growth(&self) -> f64 {
        Self::p(&self.with, 0.99) as f64 / Self::p(&self.without, 0.99) as f64
    }
    fn mean_save(&self) -> Duration {
        let n = self.with.saves.len().max(1) as u32;
        self.with.saves.iter().sum::<Duration>() / n
    }
}

impl Report<'_> {
    fn checkpoint(&self, v: CheckpointVariant) -> &CheckpointCells {
        &self.r.checkpoints[&v]
    }

    pub(crate) fn checkpoint_section(&self, s: &mut String) {
        let mib = (TENSORS.iter().sum::<usize>() * 4) >> 20;
        let _ = writeln!(s, "## 8. Checkpoints while training\n");
        let _ = writeln!(
            s,
            "{TRAINERS} trainer threads update a model of {} tensors (1-4 MiB of f32 each, {mib} \
             MiB in all), one tensor per step, while a checkpointer saves the whole model every \
             {} ms (a safetensors file, fsync and rename). mvtensor: `Store::save`, a \
             consistent snapshot written while the trainers go on. The mutex: a \
             `parking_lot::Mutex` per tensor updated in place; a consistent checkpoint locks \
             them all, clones, unlocks and writes the clones. Every file is checked (no torn \
             tensor). Step latency of the trainers, without and with the checkpointer: \
             each cell merges {CHECKPOINT_ROUNDS} rounds of {:.1} s, every variant without \
             and with in turn (which goes first alternates); the last column is what the \
             goal bounds (≤ 1.05x for mvtensor).\n",
            TENSORS.len(),
            INTERVAL.as_millis(),
            self.plan.checkpoint.as_secs_f64() / f64::from(CHECKPOINT_ROUNDS)
        );
        let _ = writeln!(
            s,
            "| variant | steps/s without | p50 / p99 without | steps/s with | p50 / p99 with | \
             checkpoints (mean time each) | p99 with ÷ without |"
        );
        let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- | --- |");
        for v in CheckpointVariant::ALL {
            let c = self.checkpoint(v);
            let rate = |r: &CheckpointRun| r.updates as f64 / self.plan.checkpoint.as_secs_f64();
            let _ = writeln!(
                s,
                "| {} | {:.0} | {} / {} | {:.0} | {} / {} | {} ({}) | {:.2}x |",
                v.name(),
                rate(&c.without),
                latency(CheckpointCells::p(&c.without, 0.5)),
                latency(CheckpointCells::p(&c.without, 0.99)),
                rate(&c.with),
                latency(CheckpointCells::p(&c.with, 0.5)),
                latency(CheckpointCells::p(&c.with, 0.99)),
                c.with.saves.len(),
                latency(c.mean_save().as_nanos() as u64),
                c.p99_growth()
            );
        }
        let _ = writeln!(s);
    }

    /// Checkpoints cost the trainers at most 5% of their p99 step latency (mvtensor).
    pub(crate) fn goal_checkpoints(&self) -> Goal {
        let mv = self.checkpoint(CheckpointVariant::Mvtensor);
        let lock = self.checkpoint(CheckpointVariant::Mutex);
        let growth = mv.p99_growth();
        Goal {
            name: "Checkpoints while training".into(),
            target: "trainers' p99 step latency grows ≤ 5% with a checkpoint every 100 ms".into(),
            measured: format!(
                "mvtensor {growth:.2}x, the mutex {:.2}x (p99 with ÷ without)",
                lock.p99_growth()
            ),
            met: growth <= 1.05,
            why: format!(
                "{growth:.2}x instead of at most 1.05x (the mutex: {:.2}x). With {} trainers and \
                 the checkpointer on {} cores, a step's p99 is a scheduler time slice for every \
                 variant ({} for mvtensor, {} for the mutex, without checkpoints). mvtensor's \
                 trainers never wait for a save, but the save keeps a core busy ({} on average \
                 for {} MiB) that the unblocked trainers then share, where the mutex's trainers \
                 sleep while its checkpointer clones. The target assumes a core to spare for \
                 the checkpointer.",
                lock.p99_growth(),
                TRAINERS,
                self.env.cores,
                latency(CheckpointCells::p(&mv.without, 0.99)),
                latency(CheckpointCells::p(&lock.without, 0.99)),
                latency(mv.mean_save().as_nanos() as u64),
                (TENSORS.iter().sum::<usize>() * 4) >> 20,
            ),
        }
    }
}
