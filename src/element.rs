//! Element types a variable can hold, and their runtime tags.

use std::fmt;

/// The runtime tag of an element type, as reported by [`Store::list`](crate::Store::list)
/// and in error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DType {
    /// `f32`
    F32,
    /// `f64`
    F64,
    /// `i32`
    I32,
    /// `i64`
    I64,
    /// IEEE half precision, [`half::f16`] (with the `half` feature, on by default)
    #[cfg(feature = "half")]
    F16,
    /// bfloat16, [`half::bf16`] (with the `half` feature, on by default)
    #[cfg(feature = "half")]
    BF16,
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::I64 => "i64",
            #[cfg(feature = "half")]
            DType::F16 => "f16",
            #[cfg(feature = "half")]
            DType::BF16 => "bf16",
        })
    }
}

/// A tensor element type: `f32`, `f64`, `i32` or `i64`; and, with the `half` feature (on by
/// default), [`half::f16`] and [`half::bf16`], whose arithmetic rounds through `f32` as the
/// `half` crate's operators do.
///
/// The trait is sealed: the store relies on each element type having exactly one [`DType`].
/// Integer arithmetic wraps on overflow (as TensorFlow's integer kernels do) instead of
/// panicking, because an `assign_add` must never panic halfway through a tensor.
pub trait Element:
    Copy + Default + PartialEq + fmt::Debug + Send + Sync + 'static + sealed::Sealed
{
    /// This type's runtime tag.
    const DTYPE: DType;
    /// `a + b` (wrapping for integers).
    fn add(a: Self, b: Self) -> Self;
    /// `a - b` (wrapping for integers).
    fn sub(a: Self, b: Self) -> Self;
    /// `a * b` (wrapping for integers).
    fn mul(a: Self, b: Self) -> Self;
    /// The value from its little-endian bytes (`bytes` is exactly `size_of::<Self>()` long).
    #[doc(hidden)]
    fn from_le_slice(bytes: &[u8]) -> Self;
    /// Appends the value's little-endian bytes.
    #[doc(hidden)]
    fn extend_le(self, out: &mut Vec<u8>);
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! float {
    ($t:ty, $tag:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$tag;
            #[inline(always)]
            fn add(a: Self, b: Self) -> Self {
                a + b
            }
            #[inline(always)]
            fn sub(a: Self, b: Self) -> Self {
                a - b
            }
            #[inline(always)]
            fn mul(a: Self, b: Self) -> Self {
                a * b
            }
            fn from_le_slice(bytes: &[u8]) -> Self {
                Self::from_le_bytes(bytes.try_into().expect("one element's bytes"))
            }
            fn extend_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    };
}

macro_rules! int {
    ($t:ty, $tag:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$tag;
            #[inline(always)]
            fn add(a: Self, b: Self) -> Self {
                a.wrapping_add(b)
            }
            #[inline(always)]
            fn sub(a: Self, b: Self) -> Self {
                a.wrapping_sub(b)
            }
            #[inline(always)]
            fn mul(a: Self, b: Self) -> Self {
                a.wrapping_mul(b)
            }
            fn from_le_slice(bytes: &[u8]) -> Self {
                Self::from_le_bytes(bytes.try_into().expect("one element's bytes"))
            }
            fn extend_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    };
}

float!(f32, F32);
float!(f64, F64);
#[cfg(feature = "half")]
float!(half::f16, F16);
#[cfg(feature = "half")]
float!(half::bf16, BF16);
int!(i32, I32);
int!(i64, I64);
