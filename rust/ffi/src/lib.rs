//! The UniFFI surface of Weir (see the Kotlin issue).
