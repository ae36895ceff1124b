//! The tensor queue's FIFOQueue semantics.

use std::time::Duration;

use mvtensor::queue::TensorQueue;
use mvtensor::{Error, QueueProblem};
use ndarray::{arr1, Array2};

fn problem(err: Error) -> QueueProblem {
    match err {
        Error::Queue { problem, .. } => problem,
        other => panic!("not a queue error: {other}"),
    }
}

#[test]
fn fifo_order_capacity_and_try_operations() {
    let q = TensorQueue::<i64>::new("q", 2, &[2]).unwrap();
    q.try_enqueue(arr1(&[1, 1])).unwrap();
    q.enqueue(arr1(&[2, 2])).unwrap();
    assert_eq!(
        problem(q.try_enqueue(arr1(&[3, 3])).unwrap_err()),
        QueueProblem::Full
    );
    assert_eq!(q.len(), 2);
    assert_eq!(q.dequeue().unwrap(), arr1(&[1, 1]).into_dyn());
    assert_eq!(q.try_dequeue().unwrap(), arr1(&[2, 2]).into_dyn());
    assert_eq!(problem(q.try_dequeue().unwrap_err()), QueueProblem::Empty);
    let err = q.enqueue(arr1(&[1, 2, 3])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "queue `q`: an element must have shape [2], this one has shape [3] (no broadcasting)"
    );
    assert_eq!(
        problem(err),
        QueueProblem::Shape {
            expected: vec![2],
            found: vec![3]
        }
    );
    assert_eq!(q.len(), 0, "nothing enqueued");
}

/// A queue whose batches no array could hold is refused when it is made, naming the queue:
/// an element count past `usize`, a full batch past `isize::MAX` bytes (zero-length axes
/// count as 1, as ndarray counts them). Every error names the queue, none a "variable".
#[test]
fn a_queue_no_batch_of_which_could_be_an_array_is_refused_at_construction() {
    let too_large = |err: Error| {
        let text = err.to_string();
        assert!(text.starts_with("queue `frames`: "), "{text}");
        assert!(!text.contains("variable"), "{text}");
        match problem(err) {
            QueueProblem::TooLarge { why, .. } => why,
            other => panic!("not TooLarge: {other}"),
        }
    };
    let count = TensorQueue::<f32>::new("frames", 1, &[1 << 40, 1 << 40]).unwrap_err();
    assert!(too_large(count).contains("element count"));
    // 2^60 f64 elements fit in usize; a batch of two of them is 2^64 bytes.
    let batch = TensorQueue::<f64>::new("frames", 2, &[1 << 60]).unwrap_err();
    assert!(too_large(batch).contains("isize::MAX bytes"));
    // 2^59 f64 a batch of one: 2^62 bytes, an array ndarray accepts (nothing is allocated).
    TensorQueue::<f64>::new("frames", 1, &[1 << 59]).unwrap();
    // No elements, but an axis no array may have beside others: ndarray would refuse the
    // batch that `dequeue_many` builds, so the queue is refused at `new`.
    let empty = TensorQueue::<i32>::new("frames", 4, &[0, usize::MAX]).unwrap_err();
    assert!(too_large(empty).contains("zero-length"));
    // The edge: a batch of 4 x (0 as 1) x 2^59 i32 counts 2^63 bytes, one past isize::MAX;
    // with 2^58 it is 2^62, and the queue works.
    let edge = TensorQueue::<i32>::new("frames", 4, &[0, 1 << 59]).unwrap_err();
    too_large(edge);
    let fits = TensorQueue::<i32>::new("frames", 4, &[0, 1 << 58]).unwrap();
    fits.enqueue(ndarray::ArrayD::<i32>::zeros(vec![0, 1 << 58]))
        .unwrap();
    assert_eq!(fits.dequeue_many(1).unwrap().shape(), &[1, 0, 1 << 58]);
}

#[test]
fn timeouts_expire_on_a_stuck_queue() {
    let q = TensorQueue::<f32>::new("stuck", 1, &[]).unwrap();
    let d = Duration::from_millis(5);
    assert_eq!(
        problem(q.dequeue_timeout(d).unwrap_err()),
        QueueProblem::TimedOut
    );
    q.enqueue(ndarray::arr0(1.0)).unwrap();
    assert_eq!(
        problem(q.enqueue_timeout(ndarray::arr0(2.0), d).unwrap_err()),
        QueueProblem::TimedOut
    );
    assert_eq!(q.dequeue_timeout(d).unwrap()[[]], 1.0);
}

#[test]
fn close_fails_enqueues_and_lets_dequeues_drain() {
    let q = TensorQueue::<f32>::new("q", 4, &[1]).unwrap();
    q.enqueue(arr1(&[1.0])).unwrap();
    q.enqueue(arr1(&[2.0])).unwrap();
    q.close(false);
    assert!(q.is_closed());
    assert_eq!(
        problem(q.enqueue(arr1(&[3.0])).unwrap_err()),
        QueueProblem::Closed
    );
    assert_eq!(
        problem(q.dequeue_many(3).unwrap_err()),
        QueueProblem::Closed,
        "fewer than 3 left"
    );
    assert_eq!(
        q.dequeue().unwrap()[[0]],
        1.0,
        "what is left still comes out, in order"
    );
    assert_eq!(q.dequeue().unwrap()[[0]], 2.0);
    assert_eq!(problem(q.dequeue().unwrap_err()), QueueProblem::Closed);
    assert_eq!(
        problem(q.dequeue_many(5).unwrap_err()),
        QueueProblem::TooMany
    );
}

/// `dequeue_many(0)` has nothing to wait for: an empty batch at once, from an empty open
/// queue (it waited for an element it then did not take) and from a closed one.
#[test]
fn dequeue_many_of_zero_returns_an_empty_batch_at_once() {
    let q = TensorQueue::<f32>::new("q", 2, &[3]).unwrap();
    assert_eq!(q.dequeue_many(0).unwrap().shape(), &[0, 3]);
    q.enqueue(arr1(&[1.0, 2.0, 3.0])).unwrap();
    assert_eq!(q.dequeue_many(0).unwrap().shape(), &[0, 3]);
    assert_eq!(q.len(), 1, "nothing taken");
    q.close(false);
    assert_eq!(q.dequeue_many(0).unwrap().shape(), &[0, 3]);
}

#[test]
fn close_with_cancel_fails_blocked_enqueuers_and_without_lets_them_finish() {
    for cancel in [true, false] {
        let q = TensorQueue::<i32>::new("q", 1, &[]).unwrap();
        q.enqueue(ndarray::arr0(1)).unwrap();
        std::thread::scope(|s| {
            let blocked = s.spawn(|| q.enqueue(ndarray::arr0(2)));
            while q.pending_enqueues() == 0 {
                std::thread::yield_now(); // until the enqueuer waits for room
            }
            q.close(cancel);
            assert_eq!(q.dequeue().unwrap()[[]], 1);
            if cancel {
                assert_eq!(
                    problem(blocked.join().unwrap().unwrap_err()),
                    QueueProblem::Closed
                );
                assert_eq!(problem(q.dequeue().unwrap_err()), QueueProblem::Closed);
            } else {
                blocked.join().unwrap().unwrap(); // a pending enqueue still completes
                assert_eq!(q.dequeue().unwrap()[[]], 2);
            }
        });
    }
}

#[test]
fn producers_and_consumers_hand_over_every_batch_once() {
    let (producers, batches) = if cfg!(miri) { (2, 10) } else { (4, 5000) };
    let q = TensorQueue::<i64>::new("batches", 8, &[2, 2]).unwrap();
    let total: i64 = std::thread::scope(|s| {
        let consumers: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    let mut sum = 0;
                    while let Ok(two) = q.dequeue_many(2) {
                        sum += two.sum();
                    }
                    while let Ok(one) = q.dequeue() {
                        sum += one.sum(); // what dequeue_many(2) left after the close
                    }
                    sum
                })
            })
            .collect();
        let producers: Vec<_> = (0..producers)
            .map(|p| {
                let q = &q;
                s.spawn(move || {
                    for i in 0..batches {
                        q.enqueue(Array2::from_elem((2, 2), (p * batches + i) as i64))
                            .unwrap();
                    }
                })
            })
            .collect();
        producers.into_iter().for_each(|p| p.join().unwrap());
        q.close(false);
        consumers.into_iter().map(|c| c.join().unwrap()).sum()
    });
    let n = (producers * batches) as i64;
    assert_eq!(
        total,
        4 * n * (n - 1) / 2,
        "every batch dequeued exactly once"
    );
}

/// Closed without cancelling, an enqueue waiting for room still completes, and the dequeues
/// wait for it: they drain it too before they report the queue closed (reported closed as
/// soon as it is empty, it would lose the element of an enqueue that returns `Ok`).
#[test]
fn a_dequeue_of_a_closed_queue_waits_for_the_enqueues_it_lets_finish() {
    let rounds = if cfg!(miri) { 3 } else { 200 };
    for _ in 0..rounds {
        let q = TensorQueue::<i32>::new("q", 1, &[]).unwrap();
        q.enqueue(ndarray::arr0(0)).unwrap(); // full
        std::thread::scope(|s| {
            let late = s.spawn(|| q.enqueue(ndarray::arr0(1)));
            while q.pending_enqueues() == 0 {
                std::thread::yield_now();
            }
            q.close(false);
            let drained: Vec<i32> = std::iter::from_fn(|| q.dequeue().ok())
                .map(|a| a[[]])
                .collect();
            assert!(late.join().unwrap().is_ok());
            assert_eq!(drained, vec![0, 1], "the late enqueue's element was lost");
        });
    }
}

/// An enqueue wakes a single `dequeue` even while a `dequeue_many` that one element does
/// not serve waits too (a single wake-up that went to the `dequeue_many` would leave the
/// `dequeue` asleep beside an element until its timeout).
#[test]
#[cfg_attr(miri, ignore = "waits on wall-clock timeouts")]
fn an_element_wakes_a_dequeue_beside_a_waiting_dequeue_many() {
    for _ in 0..20 {
        let q = TensorQueue::<i32>::new("q", 4, &[]).unwrap();
        std::thread::scope(|s| {
            let many = s.spawn(|| q.dequeue_many(3));
            // 60 s: the 1,000 yields below may each give a loaded core's time slice away.
            // With the bug the `dequeue` sleeps until its timeout, then fails.
            let one = s.spawn(|| q.dequeue_timeout(std::time::Duration::from_secs(60)));
            for _ in 0..1000 {
                std::thread::yield_now(); // let both start waiting (not needed to pass)
            }
            q.enqueue(ndarray::arr0(7)).unwrap();
            let one = one.join().unwrap().map(|a| a[[]]);
            q.close(true); // lets the `dequeue_many` go, whatever happened
            assert_eq!(one, Ok(7));
            assert!(many.join().unwrap().is_err());
        });
    }
}

/// A timeout too long for an `Instant` waits as long as it takes (as `recv_timeout` does),
/// instead of panicking on the overflow.
#[test]
fn a_timeout_of_duration_max_waits_instead_of_panicking() {
    let q = TensorQueue::<i32>::new("q", 1, &[]).unwrap();
    q.enqueue_timeout(ndarray::arr0(3), std::time::Duration::MAX)
        .unwrap();
    let got = q.dequeue_timeout(std::time::Duration::MAX).unwrap();
    assert_eq!(got[[]], 3);
}

/// `dequeue_up_to` (TensorFlow's): all `n` while the queue is open, what is left once it is
/// closed (after the enqueues a close without cancelling lets finish), an error once closed
/// and empty; `n` above the capacity is refused at once.
#[test]
fn dequeue_up_to_returns_the_last_smaller_batch_of_a_closed_queue() {
    let q = TensorQueue::<i32>::new("q", 2, &[]).unwrap();
    assert_eq!(
        problem(q.dequeue_up_to(3).unwrap_err()),
        QueueProblem::TooMany
    );
    q.enqueue(ndarray::arr0(0)).unwrap();
    q.enqueue(ndarray::arr0(1)).unwrap(); // full
    std::thread::scope(|s| {
        let late = s.spawn(|| q.enqueue(ndarray::arr0(2)));
        while q.pending_enqueues() == 0 {
            std::thread::yield_now();
        }
        q.close(false);
        assert_eq!(
            q.dequeue_up_to(2).unwrap().into_raw_vec_and_offset().0,
            [0, 1]
        );
        // The late element is what is left: a batch of one, once its enqueue is done.
        let rest = q.dequeue_up_to(2).unwrap();
        assert_eq!((rest.shape(), rest[[0]]), (&[1][..], 2));
        assert!(late.join().unwrap().is_ok());
    });
    assert_eq!(
        problem(q.dequeue_up_to(2).unwrap_err()),
        QueueProblem::Closed
    );
    // `dequeue_many` leaves a smaller rest in place for `dequeue_up_to`.
    let q = TensorQueue::<i32>::new("q", 4, &[]).unwrap();
    q.enqueue(ndarray::arr0(5)).unwrap();
    q.close(false);
    assert_eq!(
        problem(q.dequeue_many(2).unwrap_err()),
        QueueProblem::Closed
    );
    assert_eq!(q.dequeue_up_to(2).unwrap().into_raw_vec_and_offset().0, [5]);
}

/// A timed `dequeue_many` or `dequeue_up_to` on a queue with too few elements times out and
/// takes nothing.
#[test]
#[cfg_attr(miri, ignore = "waits on wall-clock timeouts")]
fn timed_batch_dequeues_expire_and_take_nothing() {
    let q = TensorQueue::<f32>::new("q", 4, &[2]).unwrap();
    q.enqueue(arr1(&[1.0, 2.0])).unwrap();
    let wait = Duration::from_millis(20);
    assert_eq!(
        problem(q.dequeue_many_timeout(2, wait).unwrap_err()),
        QueueProblem::TimedOut
    );
    assert_eq!(
        problem(q.dequeue_up_to_timeout(3, wait).unwrap_err()),
        QueueProblem::TimedOut
    );
    assert_eq!(q.len(), 1, "nothing taken");
    q.enqueue(arr1(&[3.0, 4.0])).unwrap();
    let batch = q.dequeue_many_timeout(2, wait).unwrap();
    assert_eq!(batch, ndarray::arr2(&[[1.0, 2.0], [3.0, 4.0]]).into_dyn());
}

/// A batch stacks each element in its logical order, whatever the layout it was enqueued
/// in (a column-major element, here).
#[test]
fn a_batch_stacks_elements_of_any_layout_in_order() {
    use ndarray::ShapeBuilder;
    let q = TensorQueue::<i32>::new("q", 2, &[2, 3]).unwrap();
    let column_major = Array2::from_shape_vec((2, 3).f(), (0..6).collect()).unwrap();
    q.enqueue(column_major.clone()).unwrap();
    q.enqueue(Array2::from_elem((2, 3), 9)).unwrap();
    let batch = q.dequeue_many(2).unwrap();
    assert_eq!(
        batch.index_axis(ndarray::Axis(0), 0),
        column_major.into_dyn()
    );
    assert!(batch
        .index_axis(ndarray::Axis(0), 1)
        .iter()
        .all(|&x| x == 9));
}

/// A producer that panics while holding `close_on_panic` closes the queue, cancelling
/// blocked enqueues: its consumer drains what is there and stops, where it would wait for
/// ever. Dropped without a panic, the guard leaves the queue open.
#[test]
fn a_panicking_producer_closes_the_queue_with_its_guard() {
    let q = TensorQueue::<i32>::new("q", 2, &[]).unwrap();
    drop(q.close_on_panic());
    assert!(!q.is_closed(), "no panic, no close");
    let (drained, producer) = std::thread::scope(|s| {
        let producer = s.spawn(|| {
            let _closes = q.close_on_panic();
            for i in 0..3 {
                q.enqueue(ndarray::arr0(i)).unwrap();
            }
            panic!("the data loader failed");
        });
        let drained: Vec<i32> = std::iter::from_fn(|| q.dequeue().ok())
            .map(|a| a[[]])
            .collect();
        (drained, producer.join())
    });
    assert!(producer.is_err());
    assert_eq!(drained, [0, 1, 2]);
    assert_eq!(
        problem(q.enqueue(ndarray::arr0(9)).unwrap_err()),
        QueueProblem::Closed
    );
}
