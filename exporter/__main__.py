from hpcmon.exporter.cli import main

raise SystemExit(main())
