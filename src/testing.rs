//! What unit tests share and production code never uses (compiled only for `cargo test`).

use std::sync::Once;

use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};

/// Makes the spans and events a test listens for reach its subscriber, whichever other test
/// thread met them first. tracing-core caches each callsite's interest globally. While a single
/// subscriber is registered, a thread registering a callsite decides that interest with its own
/// default subscriber, outside any lock, so a test thread that has none can store "nobody wants
/// it" just after another test started listening. With this global subscriber, which wants
/// nothing but asks every time, a callsite is never cached as unwanted, and every later choice
/// is made under tracing-core's lock with all subscribers counted. Call it before listening.
pub(crate) fn listen_to_every_callsite() {
    static GLOBAL: Once = Once::new();
    GLOBAL.call_once(|| {
        // Another global subscriber (none in the unit tests) would do as well.
        let _ = tracing::subscriber::set_global_default(AsksEveryTime);
    });
}

/// Wants nothing, and says so per event rather than once per callsite.
struct AsksEveryTime;

impl Subscriber for AsksEveryTime {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        false
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}
