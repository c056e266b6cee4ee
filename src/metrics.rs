//! `--metrics-dir DIR`: one Prometheus textfile-collector file per job,
//! `DIR/runws_<job>.prom`, replaced atomically at the end of each run (a
//! temp file renamed over it: the collector reads the last run or the one
//! before, never half of one; the temp file's name does not end in `.prom`).

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::error::Error;
use crate::fsx::Dir;

/// What the file says of one run.
pub struct Sample<'a> {
    /// The job name (the run id alphabet: safe in a file name and a label).
    pub job: &'a str,
    pub finished: SystemTime,
    pub duration: Duration,
    pub exit_code: u8,
    pub input_bytes: u64,
    pub output_bytes: u64,
}

/// The file's name for `job`.
pub fn file_name(job: &str) -> String {
    format!("runws_{job}.prom")
}

/// The file's text: each metric with its help and type, labelled by job.
pub fn render(s: &Sample<'_>) -> String {
    let at = s.finished.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs_f64();
    let job = s.job.replace('\\', "\\\\").replace('"', "\\\"");
    let metrics: [(&str, &str, String); 6] = [
        ("last_run_timestamp_seconds", "When the job's last run ended (Unix time).", format!("{at:.3}")),
        (
            "last_run_duration_seconds",
            "How long the job's last run took, from start to its recorded end.",
            format!("{:.3}", s.duration.as_secs_f64()),
        ),
        (
            "last_run_exit_code",
            "The exit status runws reported for the job's last run.",
            s.exit_code.to_string(),
        ),
        (
            "last_run_success",
            "1 when the job's last run exited 0, else 0.",
            u8::from(s.exit_code == 0).to_string(),
        ),
        ("last_run_input_bytes", "Bytes of the inputs of the job's last run.", s.input_bytes.to_string()),
        ("last_run_output_bytes", "Bytes of the outputs of the job's last run.", s.output_bytes.to_string()),
    ];
    let mut text = String::new();
    for (name, help, value) in metrics {
        text.push_str(&format!(
            "# HELP runws_{name} {help}\n# TYPE runws_{name} gauge\nrunws_{name}{{job=\"{job}\"}} {value}\n"
        ));
    }
    text
}

/// Writes the job's file in `dir` atomically.
pub fn write(dir: &Path, s: &Sample<'_>) -> Result<(), Error> {
    Dir::open(dir)?.write_atomic(&file_name(s.job), render(s).as_bytes(), 0o644, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_gauge_each_labelled_by_job() {
        let text = render(&Sample {
            job: "nightly",
            finished: SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_250),
            duration: Duration::from_millis(1500),
            exit_code: 3,
            input_bytes: 10,
            output_bytes: 20,
        });
        assert!(text.contains("runws_last_run_timestamp_seconds{job=\"nightly\"} 1700000000.250\n"));
        assert!(text.contains("runws_last_run_duration_seconds{job=\"nightly\"} 1.500\n"));
        assert!(text.contains("runws_last_run_exit_code{job=\"nightly\"} 3\n"));
        assert!(text.contains("runws_last_run_success{job=\"nightly\"} 0\n"));
        assert!(text.contains("runws_last_run_output_bytes{job=\"nightly\"} 20\n"));
        assert_eq!(text.matches("# TYPE").count(), 6);
    }
}
