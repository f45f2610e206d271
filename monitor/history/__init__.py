"""The history of what servers claimed: versions, listings, diffs and tool histories over the API,
stored findings across servers, the fingerprint of a listing, the point-in-time page and search."""
