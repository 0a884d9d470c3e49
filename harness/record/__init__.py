"""The record kept of results: the shipped reference bundle, verification of a results file, the
reproduction matrix, TREC run files and the generated reference tables of ``docs/reference``.
Imports the layers below it."""
