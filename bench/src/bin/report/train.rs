//! Workload 9 in the report: the wine-quality trainer against the same trainer on locks,
//! its table and its goal.

use std::fmt::Write;

use crate::format::{count, rate, ratio};
use crate::goals::{ByThreads, Goal};
use crate::report::Report;
use mvtensor_bench::train::{TrainRun, TrainVariant, TRAIN_THREADS};

impl Report<'_> {
    fn train(&self, t: usize, v: TrainVariant) -> &TrainRun {
        &self.r.train[&(t, v)]
    }

    fn best_train_lock(&self, t: usize) -> (TrainVariant, f64) {
        TrainVariant::ALL
            .iter()
            .filter(|v| v.is_lock())
            .map(|&v| (v, self.train(t, v).steps_per_s))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .expect("there are locks")
    }

    /// The target loss at `t` threads: the worst final loss of mvtensor and the locks, so
    /// that each of them reaches it within its run.
    fn train_target(&self, t: usize) -> f32 {
        TrainVariant::ALL
            .iter()
            .filter(|v| **v != TrainVariant::Racy)
            .map(|&v| self.train(t, v).loss)
            .fold(f32::MIN, f32::max)
    }

    /// Seconds to the target loss, if reached.
    fn time_to_target(&self, t: usize, v: TrainVariant) -> Option<f64> {
        self.train(t, v).time_to(self.train_target(t))
    }

    /// The lock that reaches the target first, and when.
    fn fastest_lock_to_target(&self, t: usize) -> (TrainVariant, f64) {
        TrainVariant::ALL
            .iter()
            .filter(|v| v.is_lock())
            .map(|&v| (v, self.time_to_target(t, v).unwrap_or(f64::INFINITY)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .expect("there are locks")
    }

    pub(crate) fn train_section(&self, s: &mut String) {
        let _ = writeln!(s, "## 9. A trainer on real data\n");
        let _ = writeln!(
            s,
            "`examples/train.rs`'s MLP (11-32-1) on the 1,599 red wines of UCI wine-quality, \
             minibatches of 32, Adam, {} steps from the same start for every variant. \
             mvtensor: one packed variable and `optim::Optimizer`. The locks run the same Adam: \
             a std `Mutex` held for the whole step, a parking_lot `Mutex` locked to copy and \
             to apply, a parking_lot `RwLock` read-locked for the passes; *racy*: relaxed \
             atomic cells, no lock. Steps/s, median of {} alternated runs, and the final loss \
             over all wines.\n",
            self.plan.train_steps, self.plan.train_rounds
        );
        let _ = write!(s, "| threads |");
        for v in TrainVariant::ALL {
            let _ = write!(s, " {} |", v.name());
        }
        let _ = writeln!(s, " mvtensor ÷ best lock |");
        let _ = writeln!(s, "|{}", " --- |".repeat(TrainVariant::ALL.len() + 2));
        for t in TRAIN_THREADS {
            let mv = self.train(t, TrainVariant::Mvtensor);
            let _ = write!(
                s,
                "| {t} | {} (loss {:.3}) |",
                rate(mv.steps_per_s),
                mv.loss
            );
            for v in &TrainVariant::ALL[1..] {
                let x = self.train(t, *v);
                let _ = write!(
                    s,
                    " {} ({}; loss {:.3}) |",
                    rate(x.steps_per_s),
                    ratio(x.steps_per_s / mv.steps_per_s),
                    x.loss
                );
            }
            let (lock, l) = self.best_train_lock(t);
            let mark = if mv.steps_per_s >= l { "" } else { " ⚠" };
            let _ = writeln!(
                s,
                " {} ({}){mark} |",
                ratio(mv.steps_per_s / l),
                lock.name()
            );
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Time to the target loss (the worst final loss of mvtensor and the locks), from \
             the loss curve ({} points) of the median run; the plot shows {} threads.\n",
            mvtensor_bench::train::SAMPLES,
            TRAIN_THREADS[TRAIN_THREADS.len() - 1]
        );
        let _ = write!(s, "| threads | target loss |");
        for v in TrainVariant::ALL {
            let _ = write!(s, " {} |", v.name());
        }
        let _ = writeln!(s, " mvtensor ÷ fastest lock |");
        let _ = writeln!(s, "|{}", " --- |".repeat(TrainVariant::ALL.len() + 3));
        let ms = |x: Option<f64>| x.map_or("never".to_string(), |x| format!("{:.0} ms", x * 1e3));
        for t in TRAIN_THREADS {
            let _ = write!(s, "| {t} | {:.3} |", self.train_target(t));
            for v in TrainVariant::ALL {
                let _ = write!(s, " {} |", ms(self.time_to_target(t, v)));
            }
            let mv = self
                .time_to_target(t, TrainVariant::Mvtensor)
                .unwrap_or(f64::INFINITY);
            let (lock, l) = self.fastest_lock_to_target(t);
            let _ = writeln!(s, " {:.2}x ({}) |", mv / l, lock.name());
        }
        let _ = writeln!(s, "\n![Loss against wall time](plots/train_loss.svg)\n");
    }

    /// The trainer: at least as many steps/s as the best lock, 1-4 threads.
    pub(crate) fn goal_train(&self) -> Goal {
        let by = ByThreads::new(&TRAIN_THREADS, |t| {
            self.train(t, TrainVariant::Mvtensor).steps_per_s / self.best_train_lock(t).1
        });
        let worst = by.worst;
        let one = self.train(1, TrainVariant::Mvtensor).steps_per_s;
        let (lock, l) = self.best_train_lock(1);
        Goal {
            name: "A trainer on real data".into(),
            target: "≥ 1.0x the best lock's steps/s and time to a target loss ≤ the fastest \
                     lock's, 1-4 threads"
                .into(),
            measured: format!(
                "steps/s at 1/2/4 threads: {}x; time to target ÷ the fastest lock's: {}",
                by.joined(),
                TRAIN_THREADS
                    .iter()
                    .map(|&t| format!(
                        "{:.2}x",
                        self.time_to_target(t, TrainVariant::Mvtensor)
                            .unwrap_or(f64::INFINITY)
                            / self.fastest_lock_to_target(t).1
                    ))
                    .collect::<Vec<_>>()
                    .join("/")
            ),
            met: by.all_at_least(1.0)
                && TRAIN_THREADS.iter().all(|&t| {
                    self.time_to_target(t, TrainVariant::Mvtensor)
                        .unwrap_or(f64::INFINITY)
                        <= self.fastest_lock_to_target(t).1
                }),
            why: format!(
                "{:.2}x at worst ({}). Alone a step took {:.1}µs against {:.1}µs ({}): mostly \
                 the model's arithmetic, to which mvtensor adds a snapshot and an execution. \
                 Noise moves these cells more than the margin: rerun with `--scale 5` on a \
                 quiet machine before reading a few percent.",
                worst.1,
                count(worst.0, "thread"),
                1e6 / one,
                1e6 / l,
                lock.name()
            ),
        }
    }
}
