//! Id allocation for identities and selectors: dense small numbers, a freed one given out
//! again first, so the snapshot's tables indexed by them and the identities' set bitmaps stay
//! as small as the live count.

#[derive(Default)]
pub(super) struct Ids {
    free: Vec<u32>,
    next: u32,
}

impl Ids {
    pub(super) fn take(&mut self) -> u32 {
        self.free.pop().unwrap_or_else(|| {
            self.next += 1;
            self.next - 1
        })
    }

    pub(super) fn give_back(&mut self, id: u32) {
        self.free.push(id);
    }
}
