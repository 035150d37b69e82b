//! Did-you-mean: the closest valid names to a misspelled one.

/// Up to three candidates closest to `input` by Levenshtein distance, nearest first; only
/// candidates within a third of the input's length (at least 2 edits) are offered.
pub fn closest<'a>(input: &str, candidates: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let max = (input.chars().count() / 3).max(2);
    let mut scored: Vec<(usize, &str)> = candidates
        .into_iter()
        .map(|c| (strsim::levenshtein(input, c), c))
        .filter(|(d, _)| *d <= max)
        .collect();
    scored.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    scored.dedup_by(|a, b| a.1 == b.1);
    scored
        .into_iter()
        .take(3)
        .map(|(_, c)| c.to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::closest;

    #[test]
    fn offers_the_nearest_names() {
        let ops = ["files.download", "files.delete", "files.read"];
        assert_eq!(closest("files.dowload", ops), vec!["files.download"]);
        assert!(closest("zzz", ops).is_empty());
    }
}
