//! An error as one line for the user: the context chain joined by ": ".

/// The error and its causes joined by ": ", leaving out a cause whose message the line
/// already ends with (an error that quotes its source in its own message, as the engine's
/// and the devices' errors do, and also names it as its `source`).
pub fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let msg = cause.to_string();
        if line.is_empty() {
            line = msg;
        } else if !line.ends_with(&msg) {
            line.push_str(": ");
            line.push_str(&msg);
        }
    }
    line
}
