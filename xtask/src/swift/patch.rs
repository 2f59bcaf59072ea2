//! The build step applied to the generated Swift: error cases in lowerCamelCase.
//!
//! UniFFI 0.32 names the cases of an error enum like types (`WeirError.OpFailed`),
//! while Swift code expects cases in lowerCamelCase (`catch WeirError.opFailed`),
//! as UniFFI already does for plain enums. Its `rename` setting cannot help: the
//! generator turns every error case name back into UpperCamelCase. So each error
//! enum's cases are renamed in the generated text, where UniFFI writes them (the
//! declaration, the lift and the lower of its converter). UniFFI is pinned, so the
//! shape is stable; any change (a case found other than three times, no error enum)
//! fails the build instead of leaving a case half renamed.

use crate::util::Result;

/// Where an error enum's declaration starts, and its converter ends.
const DECLARATION: &str = ": Swift.Error, ";
const CONVERTER_END: &str = "public func FfiConverterType";

/// Renames the cases of every error enum in `text` (the generated Swift) to lowerCamelCase.
pub fn lower_camel_error_cases(text: &str) -> Result<String> {
    let mut text = text.to_owned();
    let mut enums = 0;
    let mut from = 0;
    while let Some((start, end, name)) = error_enum(&text, from) {
        let region = rename_cases(&text[start..end], &name)?;
        text.replace_range(start..end, &region);
        from = start + region.len();
        enums += 1;
    }
    if enums == 0 {
        return Err("the generated Swift has no error enum; did UniFFI change?".to_owned());
    }
    Ok(text)
}

/// The next error enum at or after `from`: the byte range from its
/// declaration to the end of its converter, and its name.
fn error_enum(text: &str, from: usize) -> Option<(usize, usize, String)> {
    let mut search = from;
    loop {
        let at = search + text[search..].find(DECLARATION)?;
        let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
        let line = &text[line_start..at];
        search = at + DECLARATION.len();
        // `enum Name: Swift.Error, …` at the start of a line (never a generic bound).
        let Some(name) = line.strip_prefix("enum ").filter(|name| is_identifier(name)) else {
            continue;
        };
        let converter = format!("public static func write(_ value: {name}, into buf: inout [UInt8]) {{");
        let write = at + text[at..].find(&converter)?;
        let end = write + text[write..].find(CONVERTER_END).unwrap_or(text.len() - write);
        return Some((line_start, end, name.to_owned()));
    }
}

fn is_identifier(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Renames every case of the enum `name` declared in `region` (its
/// declaration through its converter), checking each appears exactly where
/// UniFFI writes it.
fn rename_cases(region: &str, name: &str) -> Result<String> {
    let cases: Vec<&str> = region
        .lines()
        .filter_map(|line| line.strip_prefix("    case "))
        .map(|rest| rest.split(['(', ' ']).next().unwrap_or(rest))
        .filter(|case| case.starts_with(|c: char| c.is_ascii_uppercase()) && is_identifier(case))
        .collect();
    if cases.is_empty() {
        return Err(format!("error enum {name} declares no UpperCamelCase case; did UniFFI change?"));
    }
    let mut region = region.to_owned();
    for case in cases {
        let lower = lower_camel(case);
        // Declaration, lift (`return .Case(`) and lower (`case let .Case(`): with fields, as every Weir error has.
        let sites = [
            (format!("    case {case}("), format!("    case {lower}(")),
            (format!("return .{case}("), format!("return .{lower}(")),
            (format!("case let .{case}("), format!("case let .{lower}(")),
        ];
        for (anchor, replacement) in sites {
            let found = region.matches(&anchor).count();
            if found != 1 {
                return Err(format!(
                    "{name}.{case}: expected '{}' once in the generated Swift, found it {found} times; did UniFFI change?",
                    anchor.trim()
                ));
            }
            region = region.replace(&anchor, &replacement);
        }
        if region.contains(&format!(".{case}(")) || region.contains(&format!(".{case}:")) {
            return Err(format!("{name}.{case} is still used under its old name; did UniFFI change?"));
        }
    }
    Ok(region)
}

/// `OpFailed` → `opFailed`: the first letter in lower case, as Swift names cases.
fn lower_camel(case: &str) -> String {
    let mut chars = case.chars();
    chars.next().map_or_else(String::new, |first| first.to_ascii_lowercase().to_string() + chars.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GENERATED: &str = "\
enum DemoError: Swift.Error, Equatable {
    case OpFailed(stream: UInt32, description: String
    )
    case Closed(description: String
    )
}
public struct FfiConverterTypeDemoError: FfiConverterRustBuffer {
    public static func read(from buf: inout (data: Data, offset: Data.Index)) throws -> DemoError {
        case 1: return .OpFailed(
            stream: try FfiConverterUInt32.read(from: &buf),
            description: try FfiConverterString.read(from: &buf)
            )
        case 2: return .Closed(
            description: try FfiConverterString.read(from: &buf)
            )
    }
    public static func write(_ value: DemoError, into buf: inout [UInt8]) {
        switch value {
        case let .OpFailed(stream,description):
            writeInt(&buf, Int32(1))
        case let .Closed(description):
            writeInt(&buf, Int32(2))
        }
    }
}
public func FfiConverterTypeDemoError_lift(_ buf: RustBuffer) throws -> DemoError {
    // .OpFailed( outside the enum is left alone
}
";

    #[test]
    fn every_case_is_renamed_where_uniffi_writes_it() {
        let patched = lower_camel_error_cases(GENERATED).unwrap();
        for renamed in
            ["case opFailed(", "return .opFailed(", "case let .opFailed(", "case closed(", "case let .closed("]
        {
            assert!(patched.contains(renamed), "no '{renamed}' in\n{patched}");
        }
        assert!(!patched[..patched.find("_lift").unwrap()].contains("OpFailed("));
        assert!(patched.contains("// .OpFailed( outside"));
    }

    #[test]
    fn a_changed_shape_fails_instead_of_half_renaming() {
        let missing_lower = GENERATED.replace("case let .Closed(", "case .Closed(");
        assert!(lower_camel_error_cases(&missing_lower).unwrap_err().contains("DemoError.Closed"));
        assert!(lower_camel_error_cases("enum Plain { case a }").is_err());
    }
}
