//! Command-line flags for guests (`mxhost run guest.wasm -- --steps 100`): plain Rust,
//! usable in every world.

/// The value after `name` in `args`, parsed; `default` when `name` is absent. Errors:
/// `"<name> needs a value"` when nothing follows it, `"bad value for <name>: Some(..)"`
/// when the value does not parse (the Python SDK's guests print the same).
pub fn flag<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> Result<T, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => args
            .get(i + 1)
            .ok_or(format!("{name} needs a value"))?
            .parse()
            .map_err(|_| format!("bad value for {name}: {:?}", args.get(i + 1))),
    }
}

#[cfg(test)]
mod tests {
    use super::flag;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flag_parses_defaults_and_reports_errors() {
        assert_eq!(flag(&v(&["--steps", "7"]), "--steps", 1u32), Ok(7));
        assert_eq!(flag(&v(&[]), "--steps", 3u32), Ok(3));
        assert_eq!(
            flag::<u32>(&v(&["--steps"]), "--steps", 1),
            Err("--steps needs a value".into())
        );
        assert_eq!(
            flag::<u32>(&v(&["--steps", "x"]), "--steps", 1),
            Err("bad value for --steps: Some(\"x\")".into())
        );
    }
}
