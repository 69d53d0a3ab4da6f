import sys

if sys.argv[1:2] == ["run"] and any(a == "--attach" or a.startswith("--attach=")
                                    for a in sys.argv[2:4]):
    # Fake.run/Fake.popen's start: no CLI parser (fakedebugfs.sandbox.run.attach_main)
    from fakedebugfs.sandbox.run import attach_main

    code = attach_main(sys.argv[2:])
    if code is not None:
        import os

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # nothing left to clean: no interpreter teardown (~10% of the start)

from fakedebugfs.cli import main  # noqa: E402

sys.exit(main())
