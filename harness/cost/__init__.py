"""What a result cost: its cold and this-run figures derived from the ledger and the caches, the
audit's sums and projections, and the audit's tables. Imports the layers below it."""
