//! How a module's kernels are named: a C name as written, a C++ name by
//! the symbol it was mangled to.

use crate::error::{Error, Result};

/// True for a name a C linker would keep as it is (`extern "C"` kernels):
/// such a kernel is looked up as written before the compiler is asked to
/// resolve it as a C++ name.
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The one symbol of `symbols` whose C++ name, without its parameters and
/// return type, is `entry` (spaces aside: `ops::scale<float>`); `None` if
/// none is, an invalid argument listing them if several are (overloads:
/// name one by its symbol).
pub fn symbol_named<'a>(symbols: &'a [String], entry: &str) -> Result<Option<&'a str>> {
    let bare = |name: &str| name.split_whitespace().collect::<String>();
    let wanted = bare(entry);
    let options = cpp_demangle::DemangleOptions::new().no_params().no_return_type();
    let named: Vec<&str> = symbols
        .iter()
        .filter(|symbol| {
            cpp_demangle::Symbol::new(symbol.as_bytes())
                .ok()
                .and_then(|demangled| demangled.demangle(&options).ok())
                .is_some_and(|name| bare(&name) == wanted)
        })
        .map(String::as_str)
        .collect();
    match named.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        several => Err(Error::invalid(format!(
            "{entry:?} names {} kernels of the module ({}): name one by its symbol",
            several.len(),
            several.join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpp_name_finds_the_one_symbol_it_demangles_to() {
        let symbols: Vec<String> =
            ["_ZN3ops5scaleIfEEvPT_S1_m", "_ZN3ops5scaleIdEEvPT_S1_m", "_ZN3ops4overEPf", "_ZN3ops4overEPi", "plain"]
                .map(String::from)
                .to_vec();
        let named = |entry| symbol_named(&symbols, entry);
        assert_eq!(named("ops::scale<float>").unwrap(), Some("_ZN3ops5scaleIfEEvPT_S1_m"));
        assert_eq!(named(" ops::scale< double > ").unwrap(), Some("_ZN3ops5scaleIdEEvPT_S1_m"));
        assert_eq!(named("ops::scale<int>").unwrap(), None);
        assert_eq!(named("scale<float>").unwrap(), None, "a name is matched whole, namespace included");
        match named("ops::over") {
            Err(Error::InvalidArgument(message)) => {
                assert!(message.contains("names 2 kernels") && message.contains("_ZN3ops4overEPf"), "{message}")
            }
            other => panic!("an overloaded name picked one: {other:?}"),
        }
    }
}
