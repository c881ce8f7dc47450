# Written by setup.py at install time.
SOURCE_BUILD_DIRS = ['/work/main/wt/h34-embed/build']
