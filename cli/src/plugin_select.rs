//! Which embedded plugin build a QEMU can load: QEMU accepts a plugin whose API version lies
//! between its minimum and its current version, and says which when it refuses one. Pure
//! functions over what a probe printed; `qemu_checks` runs the probes.

/// What a QEMU is known to accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepts {
    /// A probe loaded and QEMU reported its range.
    Range { min: u32, cur: u32 },
    /// QEMU refused an older plugin: nothing below `min`.
    AtLeast(u32),
    /// QEMU refused a newer plugin: nothing above `cur`.
    AtMost(u32),
}

impl Accepts {
    fn admits(self, api: u32) -> bool {
        match self {
            Accepts::Range { min, cur } => (min..=cur).contains(&api),
            Accepts::AtLeast(min) => api >= min,
            Accepts::AtMost(cur) => api <= cur,
        }
    }

    /// `7 and newer`, `2 to 6`: for messages.
    pub fn describe(self) -> String {
        match self {
            Accepts::Range { min, cur } if min == cur => format!("{min} only"),
            Accepts::Range { min, cur } => format!("{min} to {cur}"),
            Accepts::AtLeast(min) => format!("{min} and newer"),
            Accepts::AtMost(cur) => format!("up to {cur}"),
        }
    }
}

/// The build to use among `builds` (API versions, any order) for a QEMU that `accepts`:
/// the newest one it admits once its range is known, since each build is made for the newest
/// ABI of its family. With only one bound known, the build closest to that bound, which a
/// probe then confirms. `None`: no build fits.
pub fn choose(builds: &[u32], accepts: Accepts) -> Option<u32> {
    let fitting = builds.iter().copied().filter(|&b| accepts.admits(b));
    match accepts {
        Accepts::Range { .. } | Accepts::AtMost(_) => fitting.max(),
        Accepts::AtLeast(_) => fitting.min(),
    }
}

/// What QEMU's refusal of a plugin for its API version says it accepts:
/// `… plugin requires API version 4, but this QEMU supports only a minimum version of 7` or
/// `… only up to version 4`.
pub fn parse_refusal(stderr: &str) -> Option<Accepts> {
    stderr.lines().find_map(|line| {
        let rest = &line[line.find("plugin requires API version ")?..];
        let number_after = |marker: &str| -> Option<u32> {
            let tail = &rest[rest.find(marker)? + marker.len()..];
            let digits: String = tail.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        };
        number_after("only a minimum version of ")
            .map(Accepts::AtLeast)
            .or_else(|| number_after("only up to version ").map(Accepts::AtMost))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUILDS: &[u32] = &[4, 7];

    #[test]
    fn the_newest_build_a_known_range_admits() {
        // QEMU 9.2/10.0 (4), 10.1/10.2 (5), 11.0 (6, if its minimum stays below 4), 11.1 (7).
        for (min, cur, want) in [
            (2, 4, Some(4)),
            (2, 5, Some(4)),
            (2, 6, Some(4)),
            (7, 7, Some(7)),
            (2, 7, Some(7)),
            (4, 9, Some(7)),
            (5, 6, None),
            (8, 9, None),
            (2, 3, None),
        ] {
            assert_eq!(
                choose(BUILDS, Accepts::Range { min, cur }),
                want,
                "{min}..{cur}"
            );
        }
    }

    #[test]
    fn one_bound_picks_the_build_nearest_it() {
        assert_eq!(choose(BUILDS, Accepts::AtLeast(7)), Some(7));
        assert_eq!(choose(BUILDS, Accepts::AtLeast(5)), Some(7));
        assert_eq!(choose(BUILDS, Accepts::AtLeast(8)), None);
        assert_eq!(choose(BUILDS, Accepts::AtMost(6)), Some(4));
        assert_eq!(choose(BUILDS, Accepts::AtMost(3)), None);
    }

    #[test]
    fn reads_qemus_refusals() {
        let old = "qemu-system-aarch64: Could not load plugin /c/p-v4.so: plugin requires API \
                   version 4, but this QEMU supports only a minimum version of 7\n";
        assert_eq!(parse_refusal(old), Some(Accepts::AtLeast(7)));
        let new = "qemu-system-aarch64: Could not load plugin /c/p-v7.so: plugin requires API \
                   version 7, but this QEMU supports only up to version 4\n";
        assert_eq!(parse_refusal(new), Some(Accepts::AtMost(4)));
        assert_eq!(
            parse_refusal("Could not load plugin /x.so: undefined symbol: foo"),
            None
        );
    }

    #[test]
    fn ranges_are_described() {
        assert_eq!(Accepts::Range { min: 7, cur: 7 }.describe(), "7 only");
        assert_eq!(Accepts::Range { min: 2, cur: 5 }.describe(), "2 to 5");
        assert_eq!(Accepts::AtLeast(8).describe(), "8 and newer");
    }
}
