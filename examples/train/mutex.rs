//! The Mutex twin of `train.rs`'s trainer: the parameters and Adam's state behind one
//! `parking_lot::Mutex`, as a trainer without mvtensor shares them. A step copies the
//! parameters out under the lock (holding it through the forward and backward pass would
//! serialise the trainers), computes the gradient, and applies Adam under the lock again, on
//! slices (`adam.rs`: the lock's holder runs the same eight-wide loop as mvtensor's
//! optimizer). Checkpoints lock, clone, unlock and write a safetensors file with the same
//! durability as mvtensor's (flushed, renamed into place, the directory flushed).

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use ndarray::{Array2, ArrayD, ArrayView1, ArrayView2};
use safetensors::tensor::{Dtype, TensorView};

use super::adam::{adam, bias_correction};
use super::wine::{init, loss_and_grads, Grads};
use super::{Fallible, Side, Stop};

/// The tensors' names in a checkpoint: parameters, then Adam's first and second moments.
const NAMES: [&str; 12] = [
    "w1", "b1", "w2", "b2", "w1.m", "b1.m", "w2.m", "b2.m", "w1.v", "b1.v", "w2.v", "b2.v",
];

/// What the lock guards: parameters (w1, b1, w2, b2), Adam's moments, the step count.
#[derive(Clone)]
struct State {
    p: [ArrayD<f32>; 4],
    m: [ArrayD<f32>; 4],
    v: [ArrayD<f32>; 4],
    t: i64,
}

/// The loss over `rows` at parameters `p` and its gradients.
fn loss_and_grads_at(p: &[ArrayD<f32>; 4], rows: &Array2<f32>) -> Fallible<(f32, Grads)> {
    let (w1, b1): (ArrayView2<f32>, ArrayView1<f32>) = (
        p[0].view().into_dimensionality()?,
        p[1].view().into_dimensionality()?,
    );
    let (w2, b2): (ArrayView2<f32>, ArrayView1<f32>) = (
        p[2].view().into_dimensionality()?,
        p[3].view().into_dimensionality()?,
    );
    Ok(loss_and_grads((&w1, &b1, &w2, &b2), rows))
}

/// The trainer's shared state.
pub struct Mutex {
    state: Arc<parking_lot::Mutex<State>>,
}

impl Mutex {
    pub fn new() -> Fallible<Self> {
        let (w1, b1, w2, b2) = init();
        let p = [w1.into_dyn(), b1.into_dyn(), w2.into_dyn(), b2.into_dyn()];
        let zeros = p.clone().map(|a| ArrayD::zeros(a.raw_dim()));
        let state = State {
            m: zeros.clone(),
            v: zeros,
            p,
            t: 0,
        };
        Ok(Self {
            state: Arc::new(parking_lot::Mutex::new(state)),
        })
    }
}

impl Side for Mutex {
    const NAME: &'static str = "Mutex";

    fn step(&self, batch: &Array2<f32>) -> Fallible<()> {
        let p = self.state.lock().p.clone(); // a consistent copy
        let (_, g) = loss_and_grads_at(&p, batch)?;
        let g = [
            g.0.into_dyn(),
            g.1.into_dyn(),
            g.2.into_dyn(),
            g.3.into_dyn(),
        ];
        let mut s = self.state.lock();
        s.t += 1;
        let bias = bias_correction(s.t);
        let State { p, m, v, .. } = &mut *s;
        for (((p, m), v), g) in p.iter_mut().zip(m).zip(v).zip(&g) {
            adam(p, m, v, g, bias);
        }
        Ok(())
    }

    fn loss(&self, data: &Array2<f32>) -> Fallible<f32> {
        let p = self.state.lock().p.clone();
        Ok(loss_and_grads_at(&p, data)?.0)
    }

    fn steps(&self) -> i64 {
        self.state.lock().t
    }

    fn checkpoint_every(&self, dir: &Path, interval: Duration) -> Fallible<Stop> {
        fs::create_dir_all(dir)?;
        let (state, dir) = (Arc::clone(&self.state), dir.to_owned());
        let (stop, stopped) = mpsc::channel::<()>();
        let saver = std::thread::spawn(move || -> Fallible<usize> {
            let mut saved = 0;
            // Wakes every `interval` until the sender is dropped.
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                let copy = state.lock().clone(); // a consistent cut, written unlocked
                save(&copy, &path(&dir, saved))?;
                if saved >= 2 {
                    fs::remove_file(path(&dir, saved - 2))?; // the newest two are kept
                }
                saved += 1;
            }
            Ok(saved)
        });
        Ok(Box::new(move || {
            drop(stop);
            saver.join().expect("the checkpointer panicked")
        }))
    }
}

fn path(dir: &Path, n: usize) -> PathBuf {
    dir.join(format!("checkpoint-{n}.safetensors"))
}

/// Writes `s` to `path` as safetensors: into a temporary file, flushed, renamed into place.
fn save(s: &State, path: &Path) -> Fallible<()> {
    let bytes: Vec<Vec<u8>> =
        s.p.iter()
            .chain(&s.m)
            .chain(&s.v)
            .map(|a| a.iter().flat_map(|x| x.to_le_bytes()).collect())
            .collect();
    let shapes =
        s.p.iter()
            .chain(&s.m)
            .chain(&s.v)
            .map(|a| a.shape().to_vec());
    let mut views = Vec::new();
    for ((name, shape), data) in NAMES.into_iter().zip(shapes).zip(&bytes) {
        views.push((name.to_string(), TensorView::new(Dtype::F32, shape, data)?));
    }
    let step = s.t.to_le_bytes();
    views.push((
        "step".into(),
        TensorView::new(Dtype::I64, Vec::new(), &step)?,
    ));
    let tmp = path.with_extension("tmp");
    safetensors::serialize_to_file(views, None, &tmp)?;
    File::open(&tmp)?.sync_all()?;
    fs::rename(&tmp, path)?;
    File::open(path.parent().expect("in a directory"))?.sync_all()?;
    Ok(())
}
