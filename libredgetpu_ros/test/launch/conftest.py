"""The launch tests here run under `launch_test` (tools/run_launch_tests.sh, called by `make test`), not in
the main pytest run: they need launch_testing's runner, whose pytest plugin does not load under pytest 9."""

collect_ignore_glob = ["test_*.py"]
