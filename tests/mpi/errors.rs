//! Typed errors across ranks: what does not match between ranks is found before any data
//! moves; a rank that cannot take rank 0's state fails the start on every rank; one rank's
//! bad gradients fail the step on every rank; a rank whose replica diverged is named.

use std::time::Duration;

use mvtensor::distributed::{Cluster, Equivalence, Held, Problem};
use mvtensor::optim::{Optimizer, Replicas};
use mvtensor::{CriticalSection, DType, Element, Error, Variable};
use ndarray::{Array1, NdFloat};

use crate::launch::{in_rank, mpirun};
use crate::model::cluster;

/// This rank's replicas over one parameter `w` of `len` elements of `A`, all `rank`, and
/// more parameters if `extra`; the error of building them.
fn refused<A: Element + NdFloat + Equivalence>(
    cluster: &Cluster,
    len: usize,
    extra: bool,
) -> (Variable<A, ndarray::Ix1>, Error) {
    let rank = cluster.rank();
    let own = A::from(rank).unwrap();
    let w = Variable::builder(Array1::from_elem(len, own))
        .name("w")
        .build();
    let mut adam = Optimizer::adam(A::from(0.1).unwrap())
        .name("adam")
        .param(&w);
    let b = Variable::builder(Array1::from_elem(2, own))
        .name("b")
        .build();
    if extra {
        adam = adam.param(&b);
    }
    let replicas = Replicas::over_mpi(adam.build().unwrap(), 1, cluster);
    (w, replicas.expect_err("the ranks differ"))
}

/// 3 ranks, three attempts: rank 2's `w` has 5 elements, not 4; rank 1's holds f64, not f32;
/// rank 1 has a second parameter. Every rank gets the error naming `w` and what each rank
/// holds (or each rank's count), and no rank's `w` changed: nothing was sent.
#[test]
fn a_shape_dtype_or_count_mismatch_fails_every_rank_before_data_moves() {
    if in_rank() {
        let cluster = cluster();
        let rank = cluster.rank();
        let held = |shapes: [(DType, usize); 3]| -> Vec<Held> {
            let each = shapes.iter().enumerate();
            each.map(|(rank, &(dtype, len))| Held {
                rank,
                dtype,
                shape: vec![len],
            })
            .collect()
        };
        let check = |error: Error, held: Vec<Held>| match error {
            Error::Distributed {
                rank: r,
                problem:
                    Problem::Mismatch {
                        variable,
                        index: 0,
                        held: found,
                    },
            } if r == rank && variable == "w" => assert_eq!(found, held),
            other => panic!("rank {rank}: {other}"),
        };
        let (w, error) = refused::<f32>(&cluster, if rank == 2 { 5 } else { 4 }, false);
        println!("rank {rank}: {error}");
        check(
            error,
            held([(DType::F32, 4), (DType::F32, 4), (DType::F32, 5)]),
        );
        assert!(w.read().iter().all(|&x| x == rank as f32), "w was changed");

        let f32s = [(DType::F32, 4), (DType::F64, 4), (DType::F32, 4)];
        if rank == 1 {
            let (w, error) = refused::<f64>(&cluster, 4, false);
            check(error, held(f32s));
            assert!(w.read().iter().all(|&x| x == 1.0), "w was changed");
        } else {
            check(refused::<f32>(&cluster, 4, false).1, held(f32s));
        }

        let error = refused::<f32>(&cluster, 4, rank == 1).1;
        // w and b, then Adam's state and a gradient per parameter.
        let counts = vec![3, 5, 3];
        assert!(
            matches!(&error, Error::Distributed { problem: Problem::VariableCount { counts: c }, .. } if *c == counts),
            "rank {rank}: {error}"
        );
        return;
    }
    let test = "errors::a_shape_dtype_or_count_mismatch_fails_every_rank_before_data_moves";
    let env = [("MPI_TEST_TIMEOUT_MS", "20000".to_owned())];
    let job = mpirun(3, test, &env, Duration::from_secs(60));
    job.assert_ok();
    assert!(
        job.output
            .contains("variable `w` (replicated variable 0) differs across ranks"),
        "{}",
        job.output
    );
}

/// 2 ranks: at step 3 rank 1's gradient has the wrong shape. Rank 1 gets its shape error,
/// rank 0 an error naming rank 1; neither applied anything of the step; the next step
/// works and the replicas still agree.
#[test]
fn bad_gradients_on_one_rank_fail_the_step_on_every_rank() {
    if in_rank() {
        let cluster = cluster();
        let rank = cluster.rank();
        let w = Variable::builder(Array1::<f32>::zeros(4)).name("w").build();
        let sgd = Optimizer::sgd(0.5).name("sgd").param(&w).build().unwrap();
        let replicas = Replicas::over_mpi(sgd, 1, &cluster).unwrap();
        let good = Array1::<f32>::from_elem(4, rank as f32 + 1.0); // mean 1.5
        let bad = Array1::<f32>::ones(3);
        for step in 1..=2 {
            assert_eq!(replicas.step(&good).unwrap(), step);
        }
        let before = w.read().to_owned();
        let error = replicas
            .step(if rank == 1 { &bad } else { &good })
            .unwrap_err();
        match (rank, &error) {
            (1, Error::ShapeMismatch { variable, .. }) => assert_eq!(variable, "w"),
            (0, Error::Distributed { rank: 0, problem }) => assert_eq!(
                *problem,
                Problem::PeerStepFailed {
                    step: 3,
                    ranks: vec![1]
                }
            ),
            _ => panic!("rank {rank}: {error}"),
        }
        assert_eq!(*w.read(), before, "nothing of step 3 applied");
        assert_eq!(replicas.optimizer().steps(), 2);
        assert_eq!(replicas.step(&good).unwrap(), 3);
        assert_eq!(w.read()[0], -3.0 * 0.5 * 1.5);
        replicas.check_agreement().unwrap();
        return;
    }
    let test = "errors::bad_gradients_on_one_rank_fail_the_step_on_every_rank";
    let env = [("MPI_TEST_TIMEOUT_MS", "20000".to_owned())];
    mpirun(2, test, &env, Duration::from_secs(60)).assert_ok();
}

/// 3 ranks take 5 steps, then rank 2's `w` is changed behind the replicas' back: every
/// rank's agreement check names `w`, rank 2 as diverged and ranks 0 and 1 as agreeing.
#[test]
fn a_rank_whose_replica_diverged_is_named() {
    if in_rank() {
        let cluster = cluster();
        let rank = cluster.rank();
        let w = Variable::builder(Array1::<f32>::zeros(4)).name("w").build();
        let adam = Optimizer::adam(0.1).name("adam").param(&w).build().unwrap();
        let replicas = Replicas::over_mpi(adam, 1, &cluster).unwrap();
        for _ in 0..5 {
            replicas.step(&Array1::from_elem(4, rank as f32)).unwrap();
        }
        let digest = replicas.check_agreement().unwrap();
        let agreed = w.read().to_owned();
        if rank == 2 {
            w.scaled_add(1e-7, &Array1::ones(4)).unwrap();
        }
        let error = replicas.check_agreement().unwrap_err();
        let expected = Problem::Diverged {
            variable: "w".into(),
            step: 5,
            diverged: vec![2],
            agree: vec![0, 1],
        };
        assert!(
            matches!(&error, Error::Distributed { rank: r, problem } if *r == rank && *problem == expected),
            "rank {rank}: {error}"
        );
        if rank == 0 {
            println!("{error}");
        }
        // Rank 2 takes the agreed value back: every rank agrees again, on the same digest.
        w.assign(agreed).unwrap();
        assert_eq!(replicas.check_agreement().unwrap(), digest);
        return;
    }
    let test = "errors::a_rank_whose_replica_diverged_is_named";
    let env = [("MPI_TEST_TIMEOUT_MS", "20000".to_owned())];
    let job = mpirun(3, test, &env, Duration::from_secs(60));
    job.assert_ok();
    assert!(
        job.output
            .contains("rank(s) [2] hold other values than rank(s) [0, 1]"),
        "{}",
        job.output
    );
}

/// 3 ranks: rank 1 builds its replicas from inside an execution of another section, so its
/// variables cannot take rank 0's state (a re-entrant execution). Rank 1 gets that error
/// with its `w` unchanged; ranks 0 and 2 get an error naming rank 1, and rank 2's `w` holds
/// rank 0's values. Every rank then builds replicas again, which works: the failure left no
/// rank behind in the collectives.
#[test]
fn a_rank_that_cannot_take_rank_0s_state_fails_every_rank() {
    if in_rank() {
        let cluster = cluster();
        let rank = cluster.rank();
        let w = Variable::builder(Array1::from_elem(4, rank as f32))
            .name("w")
            .build();
        let adam = || Optimizer::adam(0.1).name("adam").param(&w).build().unwrap();
        let error = if rank == 1 {
            let other = Variable::new(Array1::<f32>::zeros(1));
            let section = CriticalSection::builder().resource(&other).build().unwrap();
            let adam = adam();
            let replicas = section
                .execute(|_tx| Ok::<_, Error>(Replicas::over_mpi(adam, 1, &cluster)))
                .unwrap();
            replicas.expect_err("rank 1 cannot take rank 0's state")
        } else {
            Replicas::over_mpi(adam(), 1, &cluster).expect_err("rank 1 failed")
        };
        println!("rank {rank}: {error}");
        match (rank, &error) {
            (1, Error::Reentrant { .. }) => {}
            (0 | 2, Error::Distributed { rank: r, problem }) if *r == rank => {
                assert_eq!(*problem, Problem::PeerStartFailed { ranks: vec![1] });
            }
            _ => panic!("rank {rank}: {error}"),
        }
        // Rank 0 sends its values; rank 1 kept its own; rank 2 took rank 0's.
        let expected = if rank == 1 { 1.0 } else { 0.0 };
        assert!(w.read().iter().all(|&x| x == expected), "rank {rank}: w");
        let again = Replicas::over_mpi(adam(), 1, &cluster).unwrap();
        assert!(w.read().iter().all(|&x| x == 0.0), "rank {rank}: w");
        again.step(&Array1::from_elem(4, rank as f32)).unwrap();
        again.check_agreement().unwrap();
        return;
    }
    let test = "errors::a_rank_that_cannot_take_rank_0s_state_fails_every_rank";
    let env = [("MPI_TEST_TIMEOUT_MS", "20000".to_owned())];
    let job = mpirun(3, test, &env, Duration::from_secs(60));
    job.assert_ok();
    assert!(
        job.output
            .contains("rank(s) [1] could not take rank 0's state"),
        "{}",
        job.output
    );
}
