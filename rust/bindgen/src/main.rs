//! `weir-bindgen LANGUAGE LIBRARY OUT_DIR [CONFIG]`: generates the Kotlin or
//! Swift bindings of the built weir-ffi library (UniFFI library mode), with the
//! binding names of the workspace's `uniffi.toml`.
//!
//! It lives in its own crate so that the FFI library is built without
//! UniFFI's `cli` feature; `cargo xtask` runs it.

use anyhow::{bail, Context, Result};
use camino::Utf8PathBuf;
use uniffi_bindgen::bindings::{generate, GenerateOptions, TargetLanguage};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [language, library, out_dir, rest @ ..] = args.as_slice() else {
        bail!("usage: weir-bindgen kotlin|swift LIBRARY OUT_DIR [CONFIG]");
    };
    let language = match language.as_str() {
        "kotlin" => TargetLanguage::Kotlin,
        "swift" => TargetLanguage::Swift,
        other => bail!("unknown language {other}: kotlin or swift"),
    };
    let config = match rest.first() {
        Some(path) => Utf8PathBuf::from(path),
        None => Utf8PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../uniffi.toml"),
    };
    generate(GenerateOptions {
        languages: vec![language],
        source: Utf8PathBuf::from(library),
        out_dir: Utf8PathBuf::from(out_dir),
        config_override: Some(config.clone()),
        format: false,
        crate_filter: Some("weir_ffi".to_owned()),
        metadata_no_deps: true,
    })
    .with_context(|| format!("generating bindings from {library} with {config}"))
}
