//! `[ab]`: what `jsbench ab` judges in a profile, and how strictly;
//! `jsbench run` ignores it.

use serde::Deserialize;

use super::problems::Problems;
use crate::units::parse_percent;

/// What `jsbench ab` judges in a profile (`[ab]`); its flags override.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AbPlan {
    /// Patterns as for `--only`; empty: the default set.
    pub judge: Vec<String>,
    /// Fractions (0.02 for 2%).
    pub threshold: Option<f64>,
    pub latency_threshold: Option<f64>,
}

/// `[ab]`: what `jsbench ab` judges in this profile, and how strictly.
/// `jsbench run` ignores it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AbSection {
    judge: Option<Vec<String>>,
    threshold: Option<String>,
    latency_threshold: Option<String>,
}

impl AbSection {
    pub(super) fn validate(&self, problems: &mut Problems) -> AbPlan {
        let percent = |key: &str, text: &Option<String>, problems: &mut Problems| {
            text.as_ref().and_then(|t| match parse_percent(t) {
                Ok(v) => Some(v),
                Err(e) => {
                    problems.push(format!("ab.{key}"), e.to_string());
                    None
                }
            })
        };
        let judge = self.judge.clone().unwrap_or_default();
        if judge.iter().any(|p| p.trim().is_empty()) {
            problems.push(
                "ab.judge",
                "a pattern is empty; give metric names or scenario/variant/metric, `*` a wildcard",
            );
        }
        AbPlan {
            judge,
            threshold: percent("threshold", &self.threshold, problems),
            latency_threshold: percent("latency_threshold", &self.latency_threshold, problems),
        }
    }
}

/// The `[ab] judge` patterns of a profile's text as a summary records it,
/// the rest unread: `jsbench compare` judges by them too. Empty when the
/// profile has none (or the text no longer reads).
pub fn ab_judge(text: &str) -> Vec<String> {
    #[derive(Deserialize)]
    struct WithAb {
        ab: Option<AbSection>,
    }
    toml::from_str::<WithAb>(text)
        .ok()
        .and_then(|p| p.ab?.judge)
        .unwrap_or_default()
}
