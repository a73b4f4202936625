/* pattern: in progress */
typedef int clattn_placeholder_pattern;
