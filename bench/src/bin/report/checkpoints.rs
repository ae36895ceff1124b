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
            "{TRAINERS} trainers update a model of {} tensors ({mib} MiB of f32), one tensor a \
             step, while a checkpointer saves it every {} ms (safetensors, fsync, rename). \
             mvtensor: `Store::save` of a consistent snapshot while the trainers go on; the \
             mutex: one per tensor, all locked to clone, then written. Every file is checked. \
             Each cell merges {CHECKPOINT_ROUNDS} rounds of {:.1} s, without and with in \
             turn.\n",
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
                "{growth:.2}x instead of ≤ 1.05x (the mutex: {:.2}x). With {} trainers and the \
                 checkpointer on {} cores a p99 step is a scheduler slice ({} for mvtensor, {} \
                 for the mutex, without). A save never blocks mvtensor's trainers but takes a \
                 core ({} on average for {} MiB) they share. A core to spare for the checkpointer, \
                 as the target assumes, closes it.",
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
