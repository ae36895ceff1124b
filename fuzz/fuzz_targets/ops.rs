//! Differential fuzz target: a sequence of operations runs against a real [`Store`] and a
//! plain sequential model, and after every operation the two must agree exactly.
//!
//! Checked after every op:
//! * the result (new version number, or the exact [`Error`] variant and fields) is the
//!   model's;
//! * an op that fails changes nothing (every variable's version and value equal the model);
//! * every variable's value, shape, version, commit timestamp, name, id and stats equal the
//!   model's, read through `store.get`, `read`, `read_owned`, `store.list` and a fresh
//!   `store.snapshot()`;
//! * every snapshot held from earlier (pinned `Snapshot`, `OwnedSnapshot`, the old value a
//!   `fetch_update` returned, whole `StoreSnapshot`s) still shows exactly what it showed
//!   when it was taken.
//!
//! Single-threaded and deterministic: no writer ever races another, so `update` closures run
//! exactly once and no compare-and-swap is ever retried. Floats only ever hold small
//! integers (kept below 2^24 in magnitude), so float arithmetic is exact and never NaN, and
//! values are compared bit for bit.

#![no_main]

use std::collections::BTreeMap;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mvtensor::ndarray::{ArrayD, ArrayRef, Axis, IxDyn};
use mvtensor::{DType, Element, Error, OwnedSnapshot, Snapshot, Store, StoreSnapshot, Variable};

/// Longer inputs are cut here: keeps runs fast and float values provably exact.
const MAX_OPS: usize = 256;
/// At most this many snapshots of each kind are held at once; the oldest goes first.
const MAX_HELD: usize = 16;

// ---------------------------------------------------------------------------------------
// The fuzzer's input language.
// ---------------------------------------------------------------------------------------

#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
enum Name {
    A,
    B,
    C,
    D,
    Empty,
}

impl Name {
    fn as_str(self) -> &'static str {
        match self {
            Name::A => "a",
            Name::B => "b",
            Name::C => "c",
            Name::D => "d",
            Name::Empty => "",
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum DTypeSel {
    F32,
    F64,
    I32,
    I64,
}

impl DTypeSel {
    fn dtype(self) -> DType {
        match self {
            DTypeSel::F32 => DType::F32,
            DTypeSel::F64 => DType::F64,
            DTypeSel::I32 => DType::I32,
            DTypeSel::I64 => DType::I64,
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum ShapeSel {
    Scalar,
    Two,
    Three,
    Six,
    TwoByThree,
    ThreeByTwo,
    Zero,
    TwoByZero,
    OneByTwoByThree,
}

impl ShapeSel {
    fn dims(self) -> Vec<usize> {
        match self {
            ShapeSel::Scalar => vec![],
            ShapeSel::Two => vec![2],
            ShapeSel::Three => vec![3],
            ShapeSel::Six => vec![6],
            ShapeSel::TwoByThree => vec![2, 3],
            ShapeSel::ThreeByTwo => vec![3, 2],
            ShapeSel::Zero => vec![0],
            ShapeSel::TwoByZero => vec![2, 0],
            ShapeSel::OneByTwoByThree => vec![1, 2, 3],
        }
    }
}

/// How a supplied array is laid out in memory (the store must normalise it).
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Layout {
    Standard,
    /// Built with reversed dimensions, then transposed (Fortran order).
    Transposed,
    /// Axis 0 inverted (a negative stride).
    Reversed,
}

/// A tensor: its shape, layout, and elements (cycled to fill the shape; floats take the
/// low 8 bits as a signed integer).
#[derive(Arbitrary, Debug, Clone)]
struct Value {
    shape: ShapeSel,
    layout: Layout,
    data: Vec<i64>,
}

impl Value {
    fn build<A: Elem>(&self) -> ArrayD<A> {
        build_array(&self.shape.dims(), self.layout, |i| match self.data.len() {
            0 => A::from_i64(i as i64),
            len => A::from_i64(self.data[i % len]),
        })
    }
}

/// A variable, asked for with the right dtype (`None`) or a chosen, possibly wrong, one.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct Target {
    name: Name,
    dtype: Option<DTypeSel>,
}

/// The version `compare_and_set` expects.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Expected {
    Current,
    Offset(i8),
    Raw(u64),
}

/// What an `update` closure does: `x * mul + add` elementwise, then optionally a reshape
/// (values cycled into the new shape).
#[derive(Arbitrary, Debug, Clone, Copy)]
struct Transform {
    mul: i8,
    add: i8,
    reshape: Option<(ShapeSel, Layout)>,
}

#[derive(Arbitrary, Debug, Clone)]
enum Op {
    Create {
        name: Name,
        dtype: DTypeSel,
        init: Value,
    },
    CreateDynamic {
        name: Name,
        dtype: DTypeSel,
        init: Value,
    },
    Get {
        name: Name,
        dtype: DTypeSel,
    },
    Assign {
        target: Target,
        value: Value,
    },
    AssignAdd {
        target: Target,
        delta: Value,
    },
    AssignSub {
        target: Target,
        delta: Value,
    },
    Update {
        target: Target,
        transform: Transform,
    },
    FetchUpdate {
        target: Target,
        transform: Transform,
        hold: bool,
    },
    CompareAndSet {
        target: Target,
        expected: Expected,
        value: Value,
    },
    Read {
        target: Target,
        hold: bool,
    },
    ReadOwned {
        target: Target,
    },
    StoreSnapshot {
        hold: bool,
    },
    Release {
        which: u8,
        store_snapshot: bool,
    },
}

// ---------------------------------------------------------------------------------------
// Element types, written independently of mvtensor's own arithmetic.
// ---------------------------------------------------------------------------------------

/// A model value of any element type.
#[derive(Debug, Clone)]
enum Arr {
    F32(ArrayD<f32>),
    F64(ArrayD<f64>),
    I32(ArrayD<i32>),
    I64(ArrayD<i64>),
}

impl Arr {
    fn shape(&self) -> &[usize] {
        match self {
            Arr::F32(a) => a.shape(),
            Arr::F64(a) => a.shape(),
            Arr::I32(a) => a.shape(),
            Arr::I64(a) => a.shape(),
        }
    }
}

trait Elem: Element {
    fn from_i64(x: i64) -> Self;
    fn model_add(a: Self, b: Self) -> Self;
    fn model_sub(a: Self, b: Self) -> Self;
    /// `x * mul + add`; floats are then reduced modulo 4096 to stay small and exact.
    fn scale_shift(x: Self, mul: i8, add: i8) -> Self;
    fn bits(x: Self) -> u64;
    fn wrap(a: ArrayD<Self>) -> Arr;
    fn unwrap(a: &Arr) -> Option<&ArrayD<Self>>;
}

macro_rules! float_elem {
    ($t:ty, $tag:ident) => {
        impl Elem for $t {
            fn from_i64(x: i64) -> Self {
                (x as i8) as $t
            }
            fn model_add(a: Self, b: Self) -> Self {
                a + b
            }
            fn model_sub(a: Self, b: Self) -> Self {
                a - b
            }
            fn scale_shift(x: Self, mul: i8, add: i8) -> Self {
                (x * mul as $t + add as $t) % 4096.0
            }
            fn bits(x: Self) -> u64 {
                assert!(
                    !x.is_nan(),
                    "a float became NaN: the fuzz target's values are not small"
                );
                x.to_bits() as u64
            }
            fn wrap(a: ArrayD<Self>) -> Arr {
                Arr::$tag(a)
            }
            fn unwrap(a: &Arr) -> Option<&ArrayD<Self>> {
                match a {
                    Arr::$tag(a) => Some(a),
                    _ => None,
                }
            }
        }
    };
}

macro_rules! int_elem {
    ($t:ty, $tag:ident) => {
        impl Elem for $t {
            fn from_i64(x: i64) -> Self {
                x as $t
            }
            fn model_add(a: Self, b: Self) -> Self {
                a.wrapping_add(b)
            }
            fn model_sub(a: Self, b: Self) -> Self {
                a.wrapping_sub(b)
            }
            fn scale_shift(x: Self, mul: i8, add: i8) -> Self {
                x.wrapping_mul(mul as $t).wrapping_add(add as $t)
            }
            fn bits(x: Self) -> u64 {
                x as u64
            }
            fn wrap(a: ArrayD<Self>) -> Arr {
                Arr::$tag(a)
            }
            fn unwrap(a: &Arr) -> Option<&ArrayD<Self>> {
                match a {
                    Arr::$tag(a) => Some(a),
                    _ => None,
                }
            }
        }
    };
}

float_elem!(f32, F32);
float_elem!(f64, F64);
int_elem!(i32, I32);
int_elem!(i64, I64);

/// Runs `$body` with `$A` bound to the element type of `$dtype`.
macro_rules! with_dtype {
    ($dtype:expr, $A:ident => $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $A = f32;
                $body
            }
            DType::F64 => {
                type $A = f64;
                $body
            }
            DType::I32 => {
                type $A = i32;
                $body
            }
            DType::I64 => {
                type $A = i64;
                $body
            }
            other => panic!("the fuzz target does not know dtype {other:?}"),
        }
    };
}

/// Another dtype than `dtype`, for deliberately wrong typed lookups.
fn other_dtype(dtype: DType) -> DType {
    if dtype == DType::I64 {
        DType::F32
    } else {
        DType::I64
    }
}

fn build_array<A: Elem>(dims: &[usize], layout: Layout, elem: impl Fn(usize) -> A) -> ArrayD<A> {
    let n: usize = dims.iter().product();
    let elems: Vec<A> = (0..n).map(elem).collect();
    match layout {
        Layout::Transposed if dims.len() >= 2 => {
            let reversed: Vec<usize> = dims.iter().rev().copied().collect();
            ArrayD::from_shape_vec(IxDyn(&reversed), elems)
                .expect("length equals the shape's size")
                .reversed_axes()
        }
        Layout::Reversed if !dims.is_empty() => {
            let mut a =
                ArrayD::from_shape_vec(IxDyn(dims), elems).expect("length equals the shape's size");
            a.invert_axis(Axis(0));
            a
        }
        _ => ArrayD::from_shape_vec(IxDyn(dims), elems).expect("length equals the shape's size"),
    }
}

/// The `update` closure, shared by the store (on its current value) and the model (on its).
fn transform<A: Elem>(cur: &ArrayD<A>, t: Transform) -> ArrayD<A> {
    let mapped = cur.map(|&x| A::scale_shift(x, t.mul, t.add));
    match t.reshape {
        None => mapped,
        Some((shape, layout)) => {
            let flat: Vec<A> = mapped.iter().copied().collect();
            build_array(&shape.dims(), layout, |i| match flat.len() {
                0 => A::from_i64(i as i64),
                len => flat[i % len],
            })
        }
    }
}

fn elementwise<A: Elem>(cur: &ArrayD<A>, delta: &ArrayD<A>, f: fn(A, A) -> A) -> ArrayD<A> {
    assert_eq!(cur.shape(), delta.shape());
    let mut out = cur.as_standard_layout().into_owned();
    out.zip_mut_with(delta, |a, &d| *a = f(*a, d));
    out
}

fn standard<A: Elem>(a: &ArrayD<A>) -> ArrayD<A> {
    a.as_standard_layout().into_owned()
}

/// Exact equality: same shape, and every element the same bits.
fn assert_same<A: Elem>(found: &ArrayD<A>, expected: &ArrayD<A>, what: &str) {
    let same = found.shape() == expected.shape()
        && found
            .iter()
            .zip(expected.iter())
            .all(|(x, y)| A::bits(*x) == A::bits(*y));
    assert!(same, "{what}: found {found:?}, the model has {expected:?}");
}

// ---------------------------------------------------------------------------------------
// The model.
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct ModelVar {
    dtype: DType,
    dynamic: bool,
    version: u64,
    value: Arr,
    /// Commit timestamp of the current version (read from the store when it committed).
    timestamp: u64,
    /// `Variable::id` of the variable registered under this name.
    id: u64,
}

/// A snapshot taken earlier, with what it showed then.
trait Held {
    fn check(&self);
}

trait SnapView<A: Elem> {
    fn version(&self) -> u64;
    fn timestamp(&self) -> u64;
    fn data(&self) -> &ArrayD<A>;
}

impl<A: Elem> SnapView<A> for Snapshot<A> {
    fn version(&self) -> u64 {
        Snapshot::version(self)
    }
    fn timestamp(&self) -> u64 {
        Snapshot::timestamp(self)
    }
    fn data(&self) -> &ArrayD<A> {
        Snapshot::data(self)
    }
}

impl<A: Elem> SnapView<A> for OwnedSnapshot<A> {
    fn version(&self) -> u64 {
        OwnedSnapshot::version(self)
    }
    fn timestamp(&self) -> u64 {
        OwnedSnapshot::timestamp(self)
    }
    fn data(&self) -> &ArrayD<A> {
        OwnedSnapshot::data(self)
    }
}

struct HeldSnap<A: Elem, S> {
    what: String,
    snap: S,
    version: u64,
    timestamp: u64,
    value: ArrayD<A>,
}

impl<A: Elem, S: SnapView<A>> Held for HeldSnap<A, S> {
    fn check(&self) {
        assert_eq!(
            self.snap.version(),
            self.version,
            "{}: version changed",
            self.what
        );
        assert_eq!(
            self.snap.timestamp(),
            self.timestamp,
            "{}: timestamp changed",
            self.what
        );
        assert_same(
            self.snap.data(),
            &self.value,
            &format!("{}: value", self.what),
        );
    }
}

struct HeldStore {
    snap: StoreSnapshot,
    expected: BTreeMap<String, ModelVar>,
}

impl HeldStore {
    fn check(&self) {
        check_store_snapshot(&self.snap, &self.expected);
    }
}

struct Ctx {
    store: Store,
    model: BTreeMap<String, ModelVar>,
    held: Vec<Box<dyn Held>>,
    held_stores: Vec<HeldStore>,
    /// The newest commit timestamp seen: commit timestamps never go down.
    last_timestamp: u64,
    /// The newest store snapshot's clock value: every commit after it is past it.
    last_snapshot: u64,
}

impl Ctx {
    fn new() -> Self {
        Self {
            store: Store::new(),
            model: BTreeMap::new(),
            held: Vec::new(),
            held_stores: Vec::new(),
            last_timestamp: 0,
            last_snapshot: 0,
        }
    }

    fn hold(&mut self, held: Box<dyn Held>) {
        if self.held.len() == MAX_HELD {
            self.held.remove(0);
        }
        self.held.push(held);
    }

    fn model_var(&self, name: &str) -> &ModelVar {
        self.model.get(name).expect("the model has the variable")
    }

    fn model_value<A: Elem>(&self, name: &str) -> ArrayD<A> {
        A::unwrap(&self.model_var(name).value)
            .expect("model dtype")
            .clone()
    }

    /// `store.get::<A, IxDyn>(name)`, checked against the model; `Some` when it should succeed.
    fn lookup<A: Elem>(&self, name: &str) -> Option<Variable<A>> {
        let got = self.store.get::<A, IxDyn>(name);
        let expected = match self.model.get(name) {
            None => Err(Error::NotFound { name: name.into() }),
            Some(m) if m.dtype != A::DTYPE => Err(Error::DTypeMismatch {
                variable: name.into(),
                expected: A::DTYPE,
                found: m.dtype,
            }),
            Some(_) => Ok(()),
        };
        let found = got.as_ref().map(|_| ()).map_err(Clone::clone);
        assert_eq!(found, expected, "store.get::<{}>({name:?})", A::DTYPE);
        if let Err(e) = &got {
            let _ = e.to_string();
        }
        let variable = got.ok()?;
        let m = self.model_var(name);
        assert_eq!(variable.name(), name);
        assert_eq!(
            variable.id(),
            m.id,
            "store.get({name:?}) is another variable"
        );
        Some(variable)
    }

    /// Compares a write's result with the model's expectation and, if it succeeded,
    /// advances the model.
    fn settle<A: Elem>(
        &mut self,
        name: &str,
        variable: &Variable<A>,
        expected: Result<ArrayD<A>, Error>,
        got: Result<u64, Error>,
        what: &str,
    ) {
        let m = self.model_var(name);
        let expected_result = expected
            .as_ref()
            .map(|_| m.version + 1)
            .map_err(Clone::clone);
        assert_eq!(got, expected_result, "{what} on {name:?}");
        if let Err(e) = &got {
            let _ = e.to_string();
        }
        let Ok(new_value) = expected else {
            return;
        };
        let snap = variable.read();
        let timestamp = snap.timestamp();
        assert!(
            timestamp >= m.timestamp
                && timestamp >= self.last_timestamp
                && timestamp > self.last_snapshot,
            "{what} on {name:?}: commit timestamp {timestamp} is before {} (variable) / {} \
             (last commit) or not after {} (last store snapshot)",
            m.timestamp,
            self.last_timestamp,
            self.last_snapshot
        );
        drop(snap);
        let m = self
            .model
            .get_mut(name)
            .expect("the model has the variable");
        m.version += 1;
        m.value = A::wrap(standard(&new_value));
        m.timestamp = timestamp;
        self.last_timestamp = timestamp;
    }

    // --- the operations ---------------------------------------------------------------

    fn create<A: Elem>(&mut self, name: &str, init: &Value, dynamic: bool) {
        let init = init.build::<A>();
        let expected = match self.model.get(name) {
            Some(m) => Err(Error::NameTaken {
                name: name.into(),
                dtype: m.dtype,
                shape: m.value.shape().to_vec(),
            }),
            None => Ok(()),
        };
        let variable = if dynamic {
            let variable = Variable::builder(init.clone())
                .name(name)
                .dynamic_shape()
                .build();
            let got = self.store.register(&variable);
            assert_eq!(got, expected, "store.register({name:?}) (dynamic shape)");
            if got.is_err() {
                // The variable still works on its own, and is not the registered one.
                let zeros = ArrayD::<A>::default(IxDyn(&[2, 1]));
                assert_eq!(variable.assign(zeros), Ok(1), "unregistered variable");
                assert_eq!(variable.version(), 1);
            }
            got.map(|()| variable)
        } else {
            let got = self.store.variable(name, init.clone());
            let found = got.as_ref().map(|_| ()).map_err(Clone::clone);
            assert_eq!(found, expected, "store.variable({name:?})");
            got
        };
        let variable = match variable {
            Ok(variable) => variable,
            Err(e) => {
                let _ = e.to_string();
                return;
            }
        };
        assert_eq!(variable.name(), name);
        assert_eq!(variable.version(), 0);
        let snap = variable.read();
        assert_eq!(snap.version(), 0);
        assert_same(snap.data(), &init, "initial value");
        let timestamp = snap.timestamp();
        assert!(
            timestamp >= self.last_timestamp && timestamp > self.last_snapshot,
            "creation timestamp {timestamp} is before the last commit {} or not after the \
             last store snapshot {}",
            self.last_timestamp,
            self.last_snapshot
        );
        drop(snap);
        self.last_timestamp = timestamp;
        self.model.insert(
            name.to_owned(),
            ModelVar {
                dtype: A::DTYPE,
                dynamic,
                version: 0,
                value: A::wrap(standard(&init)),
                timestamp,
                id: variable.id(),
            },
        );
    }

    /// The shape check of `assign`, `update` and `compare_and_set`.
    fn check_new_shape(&self, name: &str, found: &[usize]) -> Result<(), Error> {
        let m = self.model_var(name);
        if m.dynamic || m.value.shape() == found {
            Ok(())
        } else {
            Err(Error::ShapeMismatch {
                variable: name.into(),
                expected: m.value.shape().to_vec(),
                found: found.to_vec(),
            })
        }
    }

    fn assign<A: Elem>(&mut self, name: &str, value: &Value) {
        let Some(variable) = self.lookup::<A>(name) else {
            return;
        };
        let value = value.build::<A>();
        let expected = self
            .check_new_shape(name, value.shape())
            .map(|()| value.clone());
        let got = variable.assign(value);
        self.settle(name, &variable, expected, got, "assign");
    }

    fn assign_delta<A: Elem>(&mut self, name: &str, delta: &Value, add: bool) {
        let Some(variable) = self.lookup::<A>(name) else {
            return;
        };
        let delta = delta.build::<A>();
        let cur = self.model_value::<A>(name);
        // Deltas must match the current shape, dynamic or not.
        let expected = if cur.shape() == delta.shape() {
            let f = if add { A::model_add } else { A::model_sub };
            Ok(elementwise(&cur, &delta, f))
        } else {
            Err(Error::ShapeMismatch {
                variable: name.into(),
                expected: cur.shape().to_vec(),
                found: delta.shape().to_vec(),
            })
        };
        let (got, what) = if add {
            (variable.assign_add(&delta), "assign_add")
        } else {
            (variable.assign_sub(&delta), "assign_sub")
        };
        self.settle(name, &variable, expected, got, what);
    }

    fn update<A: Elem>(&mut self, name: &str, t: Transform, fetch: bool, hold: bool) {
        let Some(variable) = self.lookup::<A>(name) else {
            return;
        };
        let cur = self.model_value::<A>(name);
        let next = transform(&cur, t);
        let expected = self.check_new_shape(name, next.shape()).map(|()| next);
        let mut calls = 0;
        let f = |seen: &ArrayRef<A, IxDyn>| {
            calls += 1;
            let seen = seen.to_owned();
            assert_same(&seen, &cur, "the value an update closure sees");
            transform(&seen, t)
        };
        let (got, what) = if fetch {
            let got = variable.fetch_update(f);
            let got = got.map(|old| {
                let m = self.model_var(name);
                assert_eq!(old.version(), m.version, "fetch_update: old version");
                assert_eq!(old.timestamp(), m.timestamp, "fetch_update: old timestamp");
                assert_same(old.data(), &cur, "fetch_update: old value");
                let version = m.version + 1;
                if hold {
                    self.hold(Box::new(HeldSnap {
                        what: format!("snapshot from fetch_update on {name:?}"),
                        version: old.version(),
                        timestamp: old.timestamp(),
                        value: cur.clone(),
                        snap: old,
                    }));
                }
                version
            });
            (got, "fetch_update")
        } else {
            (variable.update(f), "update")
        };
        assert_eq!(
            calls, 1,
            "{what}: single-threaded, the closure runs exactly once"
        );
        self.settle(name, &variable, expected, got, what);
    }

    fn compare_and_set<A: Elem>(&mut self, name: &str, expected_version: Expected, value: &Value) {
        let Some(variable) = self.lookup::<A>(name) else {
            return;
        };
        let value = value.build::<A>();
        let actual = self.model_var(name).version;
        let expected_version = match expected_version {
            Expected::Current => actual,
            Expected::Offset(offset) => actual.wrapping_add(offset as i64 as u64),
            Expected::Raw(raw) => raw,
        };
        // The shape is checked before the version.
        let expected = self.check_new_shape(name, value.shape()).and_then(|()| {
            if expected_version == actual {
                Ok(value.clone())
            } else {
                Err(Error::VersionConflict {
                    variable: name.into(),
                    expected: expected_version,
                    actual,
                })
            }
        });
        let got = variable.compare_and_set(expected_version, value);
        self.settle(name, &variable, expected, got, "compare_and_set");
    }

    fn read<A: Elem>(&mut self, name: &str, owned: bool, hold: bool) {
        let Some(variable) = self.lookup::<A>(name) else {
            return;
        };
        let m = self.model_var(name);
        let value = self.model_value::<A>(name);
        let (version, timestamp) = (m.version, m.timestamp);
        let what = format!(
            "{} of {name:?} at version {version}",
            if owned { "read_owned" } else { "read" }
        );
        if owned {
            let snap = variable.read_owned();
            let held = HeldSnap {
                what,
                version,
                timestamp,
                value,
                snap,
            };
            held.check();
            self.hold(Box::new(held));
        } else {
            let snap = variable.read();
            let held = HeldSnap {
                what,
                version,
                timestamp,
                value,
                snap,
            };
            held.check();
            if hold {
                self.hold(Box::new(held));
            }
        }
    }

    fn store_snapshot(&mut self, hold: bool) {
        let snap = self.store.snapshot();
        check_store_snapshot(&snap, &self.model);
        assert!(
            snap.timestamp() >= self.last_timestamp && snap.timestamp() > self.last_snapshot,
            "store snapshot at {} is before the last commit {} or snapshot {}",
            snap.timestamp(),
            self.last_timestamp,
            self.last_snapshot
        );
        self.last_snapshot = snap.timestamp();
        if hold {
            if self.held_stores.len() == MAX_HELD {
                self.held_stores.remove(0);
            }
            self.held_stores.push(HeldStore {
                snap,
                expected: self.model.clone(),
            });
        }
    }

    fn run(&mut self, op: &Op) {
        match op {
            Op::Create { name, dtype, init } => {
                with_dtype!(dtype.dtype(), A => self.create::<A>(name.as_str(), init, false))
            }
            Op::CreateDynamic { name, dtype, init } => {
                with_dtype!(dtype.dtype(), A => self.create::<A>(name.as_str(), init, true))
            }
            Op::Get { name, dtype } => {
                with_dtype!(dtype.dtype(), A => drop(self.lookup::<A>(name.as_str())))
            }
            Op::Assign { target, value } => {
                with_dtype!(self.dtype(target), A => self.assign::<A>(target.name.as_str(), value))
            }
            Op::AssignAdd { target, delta } => {
                with_dtype!(self.dtype(target), A => self.assign_delta::<A>(target.name.as_str(), delta, true))
            }
            Op::AssignSub { target, delta } => {
                with_dtype!(self.dtype(target), A => self.assign_delta::<A>(target.name.as_str(), delta, false))
            }
            Op::Update { target, transform } => {
                with_dtype!(self.dtype(target), A => self.update::<A>(target.name.as_str(), *transform, false, false))
            }
            Op::FetchUpdate {
                target,
                transform,
                hold,
            } => {
                with_dtype!(self.dtype(target), A => self.update::<A>(target.name.as_str(), *transform, true, *hold))
            }
            Op::CompareAndSet {
                target,
                expected,
                value,
            } => {
                with_dtype!(self.dtype(target), A => self.compare_and_set::<A>(target.name.as_str(), *expected, value))
            }
            Op::Read { target, hold } => {
                with_dtype!(self.dtype(target), A => self.read::<A>(target.name.as_str(), false, *hold))
            }
            Op::ReadOwned { target } => {
                with_dtype!(self.dtype(target), A => self.read::<A>(target.name.as_str(), true, true))
            }
            Op::StoreSnapshot { hold } => self.store_snapshot(*hold),
            Op::Release {
                which,
                store_snapshot,
            } => {
                if *store_snapshot {
                    if !self.held_stores.is_empty() {
                        let i = *which as usize % self.held_stores.len();
                        self.held_stores.remove(i);
                    }
                } else if !self.held.is_empty() {
                    let i = *which as usize % self.held.len();
                    self.held.remove(i);
                }
            }
        }
    }

    /// The dtype an op asks for: the chosen one, else the variable's own (f32 if unknown).
    fn dtype(&self, target: &Target) -> DType {
        match target.dtype {
            Some(sel) => sel.dtype(),
            None => self
                .model
                .get(target.name.as_str())
                .map_or(DType::F32, |m| m.dtype),
        }
    }

    // --- the invariants checked after every op --------------------------------------------

    fn check_all(&self) {
        let store = &self.store;
        assert_eq!(store.len(), self.model.len(), "store.len()");
        assert_eq!(store.is_empty(), self.model.is_empty(), "store.is_empty()");

        let list = store.list();
        assert_eq!(list.len(), self.model.len(), "store.list() length");
        for (info, (name, m)) in list.iter().zip(&self.model) {
            assert_eq!(&info.name, name, "store.list() names, in order");
            assert_eq!(info.dtype, m.dtype, "store.list() dtype of {name:?}");
            assert_eq!(
                info.shape,
                m.value.shape(),
                "store.list() shape of {name:?}"
            );
            assert_eq!(info.version, m.version, "store.list() version of {name:?}");
        }

        for name in [Name::A, Name::B, Name::C, Name::D, Name::Empty] {
            let name = name.as_str();
            match self.model.get(name) {
                None => {
                    assert!(!store.contains(name), "store.contains({name:?})");
                    assert_eq!(
                        store.get::<f32, IxDyn>(name).map(|_| ()),
                        Err(Error::NotFound { name: name.into() })
                    );
                }
                Some(m) => {
                    assert!(store.contains(name), "store.contains({name:?})");
                    with_dtype!(m.dtype, A => self.check_variable::<A>(name, m));
                    let wrong = other_dtype(m.dtype);
                    with_dtype!(wrong, A => assert!(self.lookup::<A>(name).is_none()));
                }
            }
        }

        let snap = store.snapshot();
        check_store_snapshot(&snap, &self.model);
        assert!(snap.timestamp() > self.last_snapshot && snap.timestamp() >= self.last_timestamp);
        for held in &self.held {
            held.check();
        }
        for held in &self.held_stores {
            held.check();
        }
    }

    fn check_variable<A: Elem>(&self, name: &str, m: &ModelVar) {
        let variable = self.lookup::<A>(name).expect("the variable is registered");
        let value = A::unwrap(&m.value).expect("model dtype");
        assert_eq!(variable.version(), m.version, "version of {name:?}");
        assert_eq!(variable.shape(), value.shape(), "shape of {name:?}");

        let snap = variable.read();
        assert_eq!(snap.version(), m.version, "read() version of {name:?}");
        assert_eq!(
            snap.timestamp(),
            m.timestamp,
            "read() timestamp of {name:?}"
        );
        assert_same(snap.data(), value, &format!("read() of {name:?}"));
        assert!(
            snap.data().is_standard_layout(),
            "read() of {name:?} is not in standard layout"
        );
        let owned = snap.to_owned_snapshot();
        assert_eq!(owned.version(), m.version);
        assert_same(
            owned.data(),
            value,
            &format!("to_owned_snapshot() of {name:?}"),
        );
        drop(snap);

        let owned = variable.read_owned();
        assert_eq!(
            owned.version(),
            m.version,
            "read_owned() version of {name:?}"
        );
        assert_eq!(
            owned.timestamp(),
            m.timestamp,
            "read_owned() timestamp of {name:?}"
        );
        assert_same(owned.data(), value, &format!("read_owned() of {name:?}"));

        let stats = variable.stats();
        assert_eq!(stats.commits, m.version, "stats().commits of {name:?}");
        assert_eq!(stats.cas_retries, 0, "stats().cas_retries of {name:?}");
        assert!(
            stats.live_versions >= 1,
            "stats().live_versions of {name:?}"
        );
    }
}

/// Checks a store snapshot against the model as it was when the snapshot was taken.
fn check_store_snapshot(snap: &StoreSnapshot, model: &BTreeMap<String, ModelVar>) {
    assert_eq!(snap.len(), model.len(), "store snapshot length");
    assert_eq!(snap.is_empty(), model.is_empty());
    let entries: Vec<_> = snap.iter().collect();
    assert_eq!(entries.len(), model.len(), "store snapshot entries");
    for (entry, (name, m)) in entries.iter().zip(model) {
        assert_eq!(entry.name(), name, "store snapshot names, in order");
        assert_eq!(entry.dtype(), m.dtype, "store snapshot dtype of {name:?}");
        assert_eq!(
            entry.shape(),
            m.value.shape(),
            "store snapshot shape of {name:?}"
        );
        assert_eq!(
            entry.version(),
            m.version,
            "store snapshot version of {name:?}"
        );
        with_dtype!(m.dtype, A => {
            let expected = A::unwrap(&m.value).expect("model dtype");
            for owned in [entry.get::<A, IxDyn>(), snap.get::<A, IxDyn>(name)] {
                let owned = owned.expect("store snapshot get");
                assert_eq!(owned.version(), m.version);
                assert_eq!(owned.timestamp(), m.timestamp, "store snapshot timestamp of {name:?}");
                assert!(owned.timestamp() <= snap.timestamp(), "a store snapshot shows a later commit");
                assert_same(owned.data(), expected, &format!("store snapshot of {name:?}"));
            }
        });
        let wrong = other_dtype(m.dtype);
        with_dtype!(wrong, A => {
            let err = Error::DTypeMismatch {
                variable: name.clone(),
                expected: wrong,
                found: m.dtype,
            };
            assert_eq!(entry.get::<A, IxDyn>().map(|_| ()), Err(err.clone()));
            assert_eq!(snap.get::<A, IxDyn>(name).map(|_| ()), Err(err));
        });
    }
    for name in [Name::A, Name::B, Name::C, Name::D, Name::Empty] {
        let name = name.as_str();
        if !model.contains_key(name) {
            assert_eq!(
                snap.get::<i64, IxDyn>(name).map(|_| ()),
                Err(Error::NotFound { name: name.into() }),
                "store snapshot get of a missing variable"
            );
        }
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let mut ctx = Ctx::new();
    ctx.check_all();
    for op in ops.iter().take(MAX_OPS) {
        ctx.run(op);
        ctx.check_all();
    }
});
