//! Unit tests of a handle's flags, without an interpreter.

use super::{Flags, Shape};

const SHAPES: [Shape; 4] = [Shape::Gone, Shape::Zero, Shape::One, Shape::Many];
/// Each flag's bits, apart.
const FIELDS: [u8; 6] = [
    Flags::CANCELLED,
    Flags::SHAPE,
    Flags::FRESH_CONTEXT,
    Flags::DEBUG,
    Flags::OFF_HEAP,
    Flags::INT_WHEN,
];

/// Every value the seven bits a `FlagCell` gives its owner can hold.
fn every_flags() -> impl Iterator<Item = Flags> {
    (0u8..0x80).map(Flags)
}

#[test]
fn the_flags_are_apart_and_fit_the_seven_bits_a_flag_cell_keeps() {
    let mut seen = 0u8;
    for bits in FIELDS {
        assert_ne!(bits, 0);
        assert_eq!(seen & bits, 0, "{bits:#b} overlaps another flag");
        seen |= bits;
    }
    assert_eq!(seen, 0x7f);
}

#[test]
fn a_shape_round_trips_through_its_two_bits() {
    for shape in SHAPES {
        assert_eq!(Shape::from_bits(shape.to_bits()), shape);
        assert!(shape.to_bits() <= 3);
    }
}

#[test]
fn new_flags_hold_what_they_were_given_and_nothing_else() {
    for shape in SHAPES {
        for fresh in [false, true] {
            for debug in [false, true] {
                let f = Flags::new(shape, fresh, debug);
                assert_eq!(f.shape(), shape);
                assert_eq!(f.fresh_context(), fresh);
                assert_eq!(f.debug(), debug);
                // Uncancelled, and (for a timer) in the heap with a float deadline.
                assert!(!f.cancelled() && !f.off_heap() && !f.int_when());
            }
        }
    }
}

#[test]
fn with_shape_changes_the_shape_alone() {
    for f in every_flags() {
        for shape in SHAPES {
            let g = f.with_shape(shape);
            assert_eq!(g.shape(), shape);
            assert_eq!(g.0 & !Flags::SHAPE, f.0 & !Flags::SHAPE);
        }
    }
}

#[test]
fn cancel_sets_cancelled_once_and_keeps_the_rest() {
    for f in every_flags() {
        match f.cancel() {
            None => assert!(f.cancelled()),
            Some(g) => {
                assert!(!f.cancelled() && g.cancelled());
                // The shape stays: debug mode's repr still shows the arguments.
                assert_eq!(g.0 & !Flags::CANCELLED, f.0);
                assert_eq!(g.cancel(), None);
            }
        }
    }
}

#[test]
fn emptied_drops_the_contents_flags_and_keeps_cancelled_and_the_timers() {
    for f in every_flags() {
        let g = f.emptied();
        assert_eq!(g.shape(), Shape::Gone);
        assert!(!g.fresh_context() && !g.debug());
        assert_eq!(g.cancelled(), f.cancelled());
        assert_eq!(g.off_heap(), f.off_heap());
        assert_eq!(g.int_when(), f.int_when());
    }
}

#[test]
fn the_timer_bits_are_set_alone() {
    for f in every_flags() {
        let off = f.unscheduled();
        assert!(off.off_heap());
        assert_eq!(off.0 & !Flags::OFF_HEAP, f.0 & !Flags::OFF_HEAP);
        let int = f.with_int_when();
        assert!(int.int_when());
        assert_eq!(int.0 & !Flags::INT_WHEN, f.0 & !Flags::INT_WHEN);
    }
}
