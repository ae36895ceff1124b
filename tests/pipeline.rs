//! A pipeline of functions sharing state, as TensorFlow's input pipelines run: a producer
//! feeds tagged batches through a `TensorQueue` to trainer threads, which share the model
//! (updated by an optimizer) and a step counter (a scalar variable). Every batch must be
//! consumed exactly once, every step number handed out once, and the model must end where
//! a serial replay of the same batches ends: the updates are sums of integer-valued f64
//! deltas, which are exact in any order.

use mvtensor::optim::Optimizer;
use mvtensor::queue::TensorQueue;
use mvtensor::{Error, QueueProblem, Variable};
use ndarray::{Array1, ArrayD};

use crate::common::scaled;

/// Elements of a batch after its id.
const WIDTH: usize = 8;

/// Batch `id`: its id, then small integers that depend on it.
fn batch(id: usize) -> Array1<f64> {
    Array1::from_shape_fn(1 + WIDTH, |j| match j {
        0 => id as f64,
        j => ((id * 7 + j * 3) % 11) as f64 - 5.0,
    })
}

/// A step's gradient from a dequeued batch (its id dropped): integer-valued, so that the
/// sum of any number of them, in any order, is exact.
fn gradient(batch: &ArrayD<f64>) -> Array1<f64> {
    Array1::from_iter(batch.iter().skip(1).map(|&x| 2.0 * x + 1.0))
}

/// What one trainer saw: the batch ids it took, and the step numbers it was handed.
struct Seen {
    ids: Vec<usize>,
    counter: Vec<i64>,
    optimizer: Vec<i64>,
}

/// `values` sorted is exactly `expected`.
fn exactly_once<T: Ord + std::fmt::Debug>(mut values: Vec<T>, expected: Vec<T>, what: &str) {
    values.sort();
    assert_eq!(values.len(), expected.len(), "{what}: how many");
    let first_wrong = values.iter().zip(&expected).position(|(a, b)| a != b);
    assert_eq!(first_wrong, None, "{what}: a value missing or repeated");
}

#[test]
fn every_batch_is_consumed_once_and_the_model_matches_a_serial_replay() -> Result<(), Error> {
    let batches = scaled(60, 3_000);
    let trainers = 4;
    let initial = Array1::from_shape_fn(WIDTH, |j| j as f64);
    let w = Variable::new(initial.clone());
    let sgd = Optimizer::sgd(1.0).name("sgd").param(&w).build()?;
    let steps = Variable::scalar(0i64);
    // Smaller than the trainers' appetite: the producer waits for room and the trainers for
    // batches, both many times over.
    let queue = TensorQueue::<f64>::new("batches", 4, &[1 + WIDTH])?;

    let seen: Vec<Seen> = std::thread::scope(|s| {
        s.spawn(|| {
            let _close = queue.close_on_panic();
            for id in 0..batches {
                if queue.enqueue(batch(id)).is_err() {
                    return; // closed by a trainer that failed: its error is the test's
                }
            }
            queue.close(false);
        });
        let workers: Vec<_> = (0..trainers)
            .map(|_| {
                s.spawn(|| -> Result<Seen, Error> {
                    // A trainer that fails or panics closes the queue, so that the producer
                    // and the other trainers stop instead of waiting for it.
                    let _close = queue.close_on_panic();
                    let failed = |e: Error| {
                        queue.close(true);
                        e
                    };
                    let mut mine = Seen {
                        ids: Vec::new(),
                        counter: Vec::new(),
                        optimizer: Vec::new(),
                    };
                    loop {
                        let b = match queue.dequeue() {
                            Ok(b) => b,
                            Err(Error::Queue {
                                problem: QueueProblem::Closed,
                                ..
                            }) => return Ok(mine),
                            Err(other) => return Err(failed(other)),
                        };
                        // A snapshot of the model: every element an integer, whatever the
                        // other trainers are applying.
                        assert!(w.read().iter().all(|x| x.fract() == 0.0));
                        mine.ids.push(b[[0]] as usize);
                        mine.optimizer
                            .push(sgd.step(&gradient(&b)).map_err(failed)?);
                        mine.counter.push(steps.fetch_add(1).map_err(failed)?);
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|t| t.join().expect("a trainer panicked"))
            .collect::<Result<_, Error>>()
    })?;

    assert!(queue.is_closed() && queue.is_empty());
    assert!(matches!(
        queue.try_dequeue(),
        Err(Error::Queue {
            problem: QueueProblem::Closed,
            ..
        })
    ));
    // Together the trainers took each batch once, and each step number once.
    let flat = |f: fn(&Seen) -> &Vec<i64>| seen.iter().flat_map(f).copied().collect();
    exactly_once(
        seen.iter().flat_map(|s| s.ids.iter().copied()).collect(),
        (0..batches).collect(),
        "batch ids",
    );
    exactly_once(
        flat(|s| &s.counter),
        (0..batches as i64).collect(),
        "counter",
    );
    exactly_once(
        flat(|s| &s.optimizer),
        (1..=batches as i64).collect(),
        "optimizer steps",
    );
    assert_eq!((steps.get(), sgd.steps()), (batches as i64, batches as i64));

    // The serial replay: the same batches, one after another, on a plain array.
    let mut replay = initial;
    for id in 0..batches {
        replay.scaled_add(-1.0, &gradient(&batch(id).into_dyn()));
    }
    assert_eq!(w.read().to_vec(), replay.to_vec());
    Ok(())
}
