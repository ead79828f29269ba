from dashboards.cli import main

raise SystemExit(main())
