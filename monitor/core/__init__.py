"""The pure domain: listings, fingerprints, the rule catalog, diffs and text. No I/O."""
