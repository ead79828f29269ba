from hpcmon.dashboards.cli import main

raise SystemExit(main())
