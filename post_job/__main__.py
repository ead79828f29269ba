from hpcmon.post_job.cli import main

raise SystemExit(main())
