from hpcmon.report.cli import main

raise SystemExit(main())
