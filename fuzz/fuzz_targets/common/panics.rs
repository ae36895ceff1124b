//! The panics a target causes on purpose (an execution that panics, caught and checked):
//! silent, while every other panic still reaches libFuzzer's hook, which aborts.

use std::sync::Once;

/// The message of the panics the target causes on purpose.
pub const PANIC: &str = "the execution panics on purpose";

pub fn is_ours(payload: &(dyn std::any::Any + Send)) -> bool {
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied());
    message == Some(PANIC)
}

/// libFuzzer's panic hook aborts on any panic. Ours stays silent for the panics the target
/// causes on purpose (caught and checked) and hands every other one to it.
pub fn quiet_hook_for_our_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !is_ours(info.payload()) {
                previous(info);
            }
        }));
    });
}
