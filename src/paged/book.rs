//! The book of a paged variable: which table owns which page, and the pages ready for reuse.
//!
//! Only the holder of the variable's book lock (the one writer at a time: a combining pass, a
//! thread inside an execution writing alone, or a section's commit) touches a book,
//! so it needs no synchronisation of its own; what crosses threads is each table's count.
//!
//! **Who owns a page.** A write copies the nodes and pages it touches and shares the rest
//! with the version before. So a page is used by a contiguous run of versions `k..=n`: from
//! the write that made it to the version before the write that replaced it. The book keeps
//! every table not yet reused in order, oldest first (the newest is the head), and hands each
//! page and node a write replaces to the *replaced* version's entry (`last_used`). A version
//! is reused once its count is zero: the oldest with the pages it was last to use (no live
//! version can reach them); one behind an older version still counted (a snapshot held for
//! a checkpoint, say) hands the pieces that older version reaches on to it, and reuses the
//! rest ([`Ledger::reclaim`]). Every node and page is thus in exactly one place: reachable
//! from the head, in some entry's `last_used`, or spare. So with no snapshot held, a paged variable owns its table (the head's pages), the
//! pages of the versions still waiting out their grace period (a few writes' worth; see
//! docs/design.md), at most `3k + 8` spare pages, `k` being the pages the last write
//! replaced, and at most `3n + 8` spare nodes, `n` being the nodes it replaced.
//!
//! **Counts, and a reader's pin.** A table's count holds the head's link, each owned
//! snapshot, and the link of each newer table that keeps it for a store snapshot in progress
//! ([`chain`]: such a link is released after the book's grace clock once cut, or at once when
//! its table is uncounted). A replaced head's count is given up by the writer itself, in
//! [`reclaim`](Ledger::reclaim), once a tick of the book's grace clock deferred after the
//! swap has run ([`retire_head`](Ledger::retire_head)); an owned snapshot's drops from any
//! thread. Dropping it only decrements; the writer finds the zero when it next reclaims. A
//! tick (crossbeam-epoch runs it, possibly inside a reader's pin) only stores its number. The
//! book itself lives as long as its variable, any counted table or any tick in flight:
//! `holders` counts them, and the release that takes it to zero
//! hands the book to the crate's orphan list (one push), which the next writer of any
//! variable frees once the epoch lets the last table go. A reader's pin never frees memory,
//! takes a lock or runs a destructor of ours (under loom, orphans are freed at once).

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::ptr;
use std::sync::Arc;

mod build;
mod chain;
mod free;

use super::layout::{Layout, Node, Page};
use super::table::PagedTable;
use crate::grace::Clock;
use crate::pool::Link;
use crate::record::Record;
use crate::sync::{clock, epoch, AtomicPtr, AtomicUsize, Handoff, Ordering};
use crate::Element;

use self::free::free_node;
pub(crate) use self::free::{let_go, release};

/// Spare tables (each with its root) a book keeps.
const SPARE_TABLES: usize = 4;

/// One table not yet reused, and the nodes and pages no newer table reaches.
struct Kept<A: Element> {
    table: *mut PagedTable<A>,
    last_used: Vec<Piece<A>>,
    /// Once the table is no longer the head: the tick of the book's clock after which the
    /// head's count of it is released ([`Ledger::retire_head`]); 0 while it is the head, or
    /// once that count is released.
    point: u64,
}

/// A node or page a write replaced, and where it was: page `p` itself (`Page(page, p)`), or
/// the node `hops` nodes below the root on page `p`'s path (`Node(node, p, hops)`), so that
/// an older table can be asked whether it reaches it ([`Ledger::reclaim`]).
enum Piece<A> {
    Page(Page<A>, usize),
    Node(Node, usize, u32),
}

impl<A: Element> Piece<A> {
    /// Whether `table` reaches this piece: the entry at its place there is this very one
    /// (a live node or page is in one place only, so the same address is the same piece).
    ///
    /// # Safety
    /// `table` is kept (every node on its paths is live).
    unsafe fn in_table(&self, table: &PagedTable<A>) -> bool {
        match *self {
            Piece::Page(page, p) => table.walk(p, table.layout.levels) == page.cast(),
            Piece::Node(node, p, hops) => table.walk(p, hops) == node.cast(),
        }
    }
}

/// See the module docs. Shared by the variable and its tables; only `holders` is touched
/// from several threads, and the writer's state is a [`Ledger`] behind an `UnsafeCell`.
#[repr(C)] // `link` first: the orphan list holds books by it
pub(crate) struct Book<A: Element> {
    link: Link,
    /// The variable, every table whose count is not zero, and every tick in flight.
    holders: AtomicUsize,
    /// Grace periods of the heads this book's writes replaced ([`Ledger::retire_head`]).
    clock: Clock,
    ledger: UnsafeCell<Ledger<A>>,
    /// Pages allocated and not freed (in tables, waiting, or spare), for `stats`.
    pub(crate) pages: Arc<AtomicUsize>,
}

/// The writer's side of a book: only the holder of the book lock touches it.
pub(crate) struct Ledger<A: Element> {
    /// The book this ledger is in, with the provenance of its allocation: tables point to it.
    book: *const Book<A>,
    layout: Arc<Layout>,
    tables: VecDeque<Kept<A>>,
    spare_pages: Vec<Page<A>>,
    spare_nodes: Vec<Node>,
    #[allow(clippy::vec_box)] // tables are handed out as `Box` pointers: they stay boxed here
    spare_tables: Vec<Box<PagedTable<A>>>,
    /// Emptied `last_used` vectors, so that a steady write allocates nothing.
    spare_lists: Vec<Vec<Piece<A>>>,
    /// Pages and nodes replaced by the last write: the spares kept are sized by them.
    last_write: (usize, usize),
    /// How many of the oldest tables have had their head count released.
    heads_released: usize,
    /// Tables that were given a link to an older one ([`chain`]), in linking order; those
    /// whose link is cut leave at the next `release_links`.
    linked: Vec<*mut PagedTable<A>>,
    /// Cut links, each with the tick of the book's clock after which its count is released.
    cut: Vec<(*mut PagedTable<A>, u64)>,
    pages: Arc<AtomicUsize>,
}

impl<A: Element> Book<A> {
    /// A book whose one table (version 0, count 1: the head's) holds `init`'s rows, in
    /// standard order. Returns the leaked book and the table.
    pub(crate) fn new(layout: Arc<Layout>, init: &[A]) -> (*const Self, *mut PagedTable<A>) {
        let pages = Arc::new(AtomicUsize::new(0));
        let book = Box::into_raw(Box::new(Self {
            link: Link::new::<Self>(),
            holders: AtomicUsize::new(2),
            clock: Clock::default(),
            ledger: UnsafeCell::new(Ledger {
                book: ptr::null(),
                layout: Arc::clone(&layout),
                tables: VecDeque::new(),
                spare_pages: Vec::new(),
                spare_nodes: Vec::new(),
                spare_tables: Vec::new(),
                spare_lists: Vec::new(),
                last_write: (0, 0),
                heads_released: 0,
                linked: Vec::new(),
                cut: Vec::new(),
                pages: Arc::clone(&pages),
            }),
            pages,
        }));
        // SAFETY: just leaked, ours alone until it is published.
        let this = unsafe { &mut *(*book).ledger.get() };
        this.book = book;
        let table = this.table(0);
        // SAFETY: a fresh table is ours alone.
        let t = unsafe { &mut *table };
        // Relaxed: version 0's timestamp only has to be a clock value from before the
        // variable can be registered anywhere (no horizon read follows: nothing links to it).
        t.record = Record::committed_at(clock().load(Ordering::Relaxed));
        t.root.fill(ptr::null_mut());
        for p in 0..layout.pages {
            let page = this.page();
            let n = layout.rows_in(p) * layout.width;
            let from = p * layout.page_len;
            // SAFETY: a fresh page of `page_len >= n` elements, ours alone; `grow` gives the
            // page's entry in the fresh table's own nodes.
            unsafe {
                std::slice::from_raw_parts_mut(page, n).copy_from_slice(&init[from..from + n]);
                *this.grow(t, p) = page.cast();
            }
        }
        this.keep(table);
        (book, table)
    }

    /// The writer's state.
    ///
    /// # Safety
    /// The caller holds the variable's book lock (or is the book's last holder), and
    /// drops the borrow before letting go.
    #[allow(clippy::mut_from_ref)] // the lock is what makes it exclusive
    pub(crate) unsafe fn ledger(&self) -> &mut Ledger<A> {
        // SAFETY: the caller's contract.
        unsafe { &mut *self.ledger.get() }
    }
}

impl<A: Element> Ledger<A> {
    /// Reuses every table whose count is zero, the head excepted, with the nodes and pages it
    /// was last to use that no older table still kept reaches (those pass to the kept table
    /// before it); then trims the spares.
    ///
    /// Not only the oldest: reused oldest first only, a table held for the length of a save
    /// (an owned snapshot's, a checkpoint's) would keep every page, node and root that every
    /// write made meanwhile replaced, and writes would slow down for the allocations. So a
    /// held table keeps its own pages and nothing else.
    ///
    /// A piece of the reused table `j` is used by versions `k..=j` (made by write `k`,
    /// replaced by write `j + 1`). The kept table before it, `i < j`, reaches it exactly
    /// when `i >= k`; if it does not (or there is none), no older table does, and the tables
    /// between `i` and `j` are reused already (uncounted): no live table reaches it.
    pub(crate) fn reclaim(&mut self) {
        self.release_heads();
        self.release_links();
        let mut j = 0;
        while j + 1 < self.tables.len() {
            // SAFETY: kept tables are alive (the book owns them).
            let kept = unsafe { &*self.tables[j].table };
            // Acquire: pairs with the Release decrement of its last holder, whose reads of
            // the table's pages then happen-before we reuse them (`loom_paged_reuse`). A
            // table whose count went to zero after `release_links` looked still has its link
            // (and is on `linked`): it waits for the next reclaim, which gives the link up
            // first (reused with it, the link's count of an older table would leak, and
            // `linked` keep a table it no longer owns: `loom_paged_behind`).
            // Relaxed: only we set links.
            if kept.refs.load(Ordering::Acquire) != 0
                || !kept.prev.load(Ordering::Relaxed).is_null()
            {
                j += 1;
                continue;
            }
            // Its head count was released (it is zero), so it was counted there.
            debug_assert!(j < self.heads_released);
            self.heads_released -= 1;
            let Kept {
                table,
                mut last_used,
                ..
            } = self.tables.remove(j).expect("j < len");
            for piece in last_used.drain(..) {
                match j.checked_sub(1) {
                    // SAFETY: kept, so every node on its paths is live (nothing it reaches
                    // is reused).
                    Some(i) if unsafe { piece.in_table(&*self.tables[i].table) } => {
                        self.tables[i].last_used.push(piece);
                    }
                    _ => self.spare(piece),
                }
            }
            self.spare_lists.push(last_used);
            // SAFETY: a kept table came from `Box::into_raw`, and nobody reaches it now.
            let table = unsafe { Box::from_raw(table) };
            // Ours from here on, whether rebuilt or freed by the trim below (loom checks every
            // reader's last look came first).
            table.handoff.touch();
            self.spare_tables.push(table);
        }
        let keep = 3 * self.last_write.0 + 8;
        while self.spare_pages.len() > keep {
            let page = self.spare_pages.pop().expect("len > keep");
            // SAFETY: a spare page is ours alone.
            unsafe { self.free_page(page) };
        }
        let keep = 3 * self.last_write.1 + 8;
        while self.spare_nodes.len() > keep {
            let node = self.spare_nodes.pop().expect("len > keep");
            // SAFETY: as above.
            unsafe { free_node(node, self.layout.fanout) };
        }
        self.spare_tables.truncate(SPARE_TABLES);
        self.spare_lists.truncate(SPARE_TABLES);
    }

    /// A piece no live table reaches, for the next writes.
    fn spare(&mut self, piece: Piece<A>) {
        match piece {
            Piece::Page(page, _) => self.spare_pages.push(page),
            Piece::Node(node, ..) => self.spare_nodes.push(node),
        }
    }

    /// Gives up the head's count of every replaced table whose grace period is over, oldest
    /// first (their points grow with their order), whether or not an older one is still
    /// counted: a newer table's link to an older one ([`chain`]) is given up only once the
    /// newer one is uncounted.
    fn release_heads(&mut self) {
        // SAFETY: the book outlives its ledger.
        let clock = &unsafe { &*self.book }.clock;
        let replaced = self.tables.len() - 1; // all but the head
        while self.heads_released < replaced {
            let kept = &mut self.tables[self.heads_released];
            if kept.point != 0 {
                if !clock.passed(kept.point) {
                    break;
                }
                kept.point = 0;
                // SAFETY: the head's count, which the book kept until the grace period of
                // the write that replaced the table was over (`passed` acquired it).
                unsafe { release(kept.table) };
            }
            self.heads_released += 1;
        }
    }

    /// Gives up the head's count of the table the last [`build`](Self::build) replaced,
    /// once every thread pinned now has unpinned: at the next tick of the book's clock
    /// ([`grace`](crate::grace)), which [`reclaim`](Self::reclaim) looks at. A tick is
    /// deferred only when none is in flight, so the writes of one grace period share one:
    /// each deferred call costs its thread's `flush` a bag moved to crossbeam's global queue
    /// (a node allocated here and freed by whichever thread collects it), where a flush with
    /// nothing deferred only collects and pushes the epoch along.
    ///
    /// Must be called right after the new head is published, before the next `build`.
    pub(crate) fn retire_head(&mut self, guard: &epoch::Guard) {
        // SAFETY: the book outlives its ledger.
        let book = unsafe { &*self.book };
        let at = self.tables.len() - 2; // the head's predecessor: the table just replaced
        self.tables[at].point = book.clock.seal_point();
        if let Some(tick) = book.clock.next_tick(false) {
            // Relaxed: we are a holder (through the variable), so the book is alive; the tick
            // gives its hold up with a Release decrement.
            book.holders.fetch_add(1, Ordering::Relaxed);
            let tick_of = Ticking(self.book);
            guard.defer(move || {
                let tick_of = tick_of;
                // SAFETY: the tick's hold keeps the book alive until `let_go`.
                unsafe {
                    (*tick_of.0).clock.ran(tick);
                    let_go(tick_of.0);
                }
            });
        }
        guard.flush();
    }

    /// The tables whose head count is still the book's (replaced, their grace period not
    /// seen over): the variable's drop hands each to crossbeam-epoch.
    pub(crate) fn take_head_counts(&mut self) -> impl Iterator<Item = *mut PagedTable<A>> + '_ {
        self.tables
            .iter_mut()
            .filter(|kept| kept.point != 0)
            .map(|kept| {
                kept.point = 0;
                kept.table
            })
    }

    fn keep(&mut self, table: *mut PagedTable<A>) {
        let last_used = self.spare_lists.pop().unwrap_or_default();
        self.tables.push_back(Kept {
            table,
            last_used,
            point: 0,
        });
    }

    /// A table struct with a root of the layout's length (contents stale), count 1.
    fn table(&mut self, number: u64) -> *mut PagedTable<A> {
        let mut table = self.spare_tables.pop().unwrap_or_else(|| {
            Box::new(PagedTable {
                link: Link::counted::<PagedTable<A>>(free::release_link::<A>),
                number: 0,
                record: Record::committed_at(0),
                prev: AtomicPtr::new(ptr::null_mut()),
                root: vec![ptr::null_mut(); self.layout.root_len].into_boxed_slice(),
                refs: AtomicUsize::new(0),
                book: self.book,
                layout: Arc::clone(&self.layout),
                handoff: Handoff::default(),
            })
        });
        table.handoff.touch(); // (re)built from here on: see `PagedTable::handoff`

        // Relaxed: ours alone (a reused table was uncounted, its link given up).
        debug_assert!(table.prev.load(Ordering::Relaxed).is_null());
        table.number = number;
        table.refs = AtomicUsize::new(1);
        Box::into_raw(table)
    }

    fn page(&mut self) -> Page<A> {
        self.spare_pages.pop().unwrap_or_else(|| {
            // Relaxed: a statistic.
            self.pages.fetch_add(1, Ordering::Relaxed);
            Box::into_raw(vec![A::default(); self.layout.page_len].into_boxed_slice()).cast()
        })
    }

    /// A node (contents stale).
    fn node(&mut self) -> Node {
        self.spare_nodes.pop().unwrap_or_else(|| {
            Box::into_raw(vec![ptr::null_mut::<()>(); self.layout.fanout].into_boxed_slice()).cast()
        })
    }
}

/// A book whose tick is in flight, for the deferred call that ends it.
struct Ticking<A: Element>(*const Book<A>);

// SAFETY: the call only stores the tick's number in the book's clock (atomic) and gives up
// its hold (an atomic decrement, at most an orphan push), on whichever thread runs it.
unsafe impl<A: Element> Send for Ticking<A> {}
