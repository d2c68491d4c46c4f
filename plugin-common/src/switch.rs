//! The plugins' boolean environment switches (the `MXHOST_MX_*` A/B and diagnostic switches,
//! `MXHOST_PINNED_UPLOADS`): one rule for all of them, so `=1`, `=on` and `=true` mean the same
//! everywhere.

/// The switch `name`: unset or empty gives `default`; `0`, `off` and `false` are off; anything
/// else is on.
pub fn env_flag(name: &str, default: bool) -> bool {
    flag_value(std::env::var(name).ok().as_deref(), default)
}

/// [`env_flag`]'s rule on a variable's value (`None` when unset).
pub fn flag_value(v: Option<&str>, default: bool) -> bool {
    match v.map(str::trim) {
        None | Some("") => default,
        Some("0") | Some("off") | Some("false") => false,
        Some(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::flag_value;

    #[test]
    fn unset_or_empty_is_the_default_and_the_off_words_are_off() {
        for d in [false, true] {
            assert_eq!(flag_value(None, d), d);
            assert_eq!(flag_value(Some(" "), d), d);
            for off in ["0", "off", "false", " 0 "] {
                assert!(!flag_value(Some(off), d), "{off:?}");
            }
            for on in ["1", "on", "true", "yes"] {
                assert!(flag_value(Some(on), d), "{on:?}");
            }
        }
    }
}
