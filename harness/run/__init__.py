"""Running jobs: the runner's one loop, the Ray runner, parameter tuning and submission checks.
Imports the layers below it."""
