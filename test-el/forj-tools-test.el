;;; forj-tools-test.el --- Tests of the tool-call block parser  -*- lexical-binding: t; -*-

;;; Commentary:

;; Edge cases of `forj-tools-parse-region': what counts as a call, and
;; how everything that does not becomes an error entry, never an error.

;;; Code:

(require 'ert)
(require 'forj-tools)

(defun forj-tools-test--parse (text)
  "Parse TEXT as a buffer and return the entries."
  (with-temp-buffer
    (insert text)
    (forj-tools-parse-region (point-min) (point-max))))

(defun forj-tools-test--kinds (entries)
  "Each entry of ENTRIES as its call id, or (error MESSAGE)."
  (mapcar (lambda (e) (if (plist-get e :call)
                          (plist-get (plist-get e :call) :id)
                        (list 'error (plist-get e :error))))
          entries))

(ert-deftest forj-test-tools-parse-calls-in-order ()
  "Every block of a message is one call, in buffer order."
  (let ((entries (forj-tools-test--parse "Let me look.

```tool-call
{\"id\": \"1\", \"name\": \"read_file\", \"args\": {\"path\": \"a.el\"}}
```

And then:

~~~~ tool-call
{\"id\": \"2\", \"name\": \"glob\", \"args\": {\"patterns\": [\"*.el\"]}, \"meta\": {\"cwd\": \".\"}}
~~~~
")))
    (should (equal (forj-tools-test--kinds entries) '("1" "2")))
    (let ((call (plist-get (nth 1 entries) :call)))
      (should (equal (plist-get (plist-get call :args) :patterns) ["*.el"]))
      (should (equal (forj-tools-json-encode call)
                     "{\"id\":\"2\",\"name\":\"glob\",\"args\":{\"patterns\":[\"*.el\"]},\"meta\":{\"cwd\":\".\"}}")))))

(ert-deftest forj-test-tools-parse-fences-inside-code-are-not-calls ()
  "A tool-call fence shown inside another code block is content."
  (let ((entries (forj-tools-test--parse "Here is how to call a tool:

````markdown
```tool-call
{\"id\": \"x\", \"name\": \"write_file\", \"args\": {}}
```
````

```python
print('```tool-call')
```
")))
    (should (null entries))))

(ert-deftest forj-test-tools-parse-broken-blocks-become-errors ()
  "Broken JSON, trailing garbage, comments, missing fields: errors with positions."
  (let ((entries (forj-tools-test--parse "```tool-call
{\"id\": \"1\", \"name\": \"read_file\", \"args\": {\"path\": \"a\"}
```
```tool-call
{\"id\": \"2\", \"name\": \"read_file\"} trailing
```
```tool-call
// a comment
{\"id\": \"3\", \"name\": \"read_file\"}
```
```tool-call
{\"name\": \"read_file\"}
```
```tool-call
{\"id\": \"5\", \"args\": {}}
```
```tool-call
[1, 2]
```
```tool-call
```
")))
    (should (= (length entries) 7))
    (should (cl-every (lambda (e) (plist-get e :error)) entries))
    (should (string-match-p "Invalid JSON in the tool-call block at line 3.*expected" (plist-get (nth 0 entries) :error)))
    (should (string-match-p "Invalid JSON.*line 5" (plist-get (nth 1 entries) :error)))
    (should (string-match-p "Invalid JSON" (plist-get (nth 2 entries) :error)))
    (should (string-match-p "no \"id\"" (plist-get (nth 3 entries) :error)))
    (should (string-match-p "no \"name\"" (plist-get (nth 4 entries) :error)))
    (should (equal (plist-get (nth 4 entries) :id) "5"))
    (should (string-match-p "one JSON object" (plist-get (nth 5 entries) :error)))
    (should (string-match-p "empty" (plist-get (nth 6 entries) :error)))))

(ert-deftest forj-test-tools-parse-unclosed-fence ()
  "A tool-call block that never closes is an error entry up to the end."
  (let ((entries (forj-tools-test--parse "text\n```tool-call\n{\"id\": \"1\", \"name\": \"read_file\"}\n")))
    (should (equal (forj-tools-test--kinds entries)
                   '((error "The tool-call block at line 2 is never closed with ```"))))))

(ert-deftest forj-test-tools-parse-huge-block ()
  "A 10 MB block is refused by size, quickly, without parsing it."
  (let* ((forj-tools-max-block-bytes (* 1024 1024))
         (big (concat "```tool-call\n{\"id\": \"1\", \"name\": \"write_file\", \"args\": {\"path\": \"x\", \"content\": \""
                      (make-string (* 10 1024 1024) ?a) "\"}}\n```\n"))
         (entries (forj-tools-test--parse big)))
    (should (= (length entries) 1))
    (should (string-match-p "over the 1048576-byte limit" (plist-get (car entries) :error)))))

(ert-deftest forj-test-tools-parse-region-bounds ()
  "Only blocks that start inside the region count."
  (with-temp-buffer
    (insert "```tool-call\n{\"id\": \"a\", \"name\": \"glob\"}\n```\n")
    (let ((middle (point)))
      (insert "```tool-call\n{\"id\": \"b\", \"name\": \"glob\"}\n```\n")
      (should (equal (forj-tools-test--kinds (forj-tools-parse-region middle (point-max)))
                     '("b")))
      (should (equal (forj-tools-test--kinds (forj-tools-parse-region (point-min) middle))
                     '("a"))))))

(ert-deftest forj-test-tools-parse-keeps-false-and-null ()
  "false, null and empty arrays survive the round trip to the worker."
  (let* ((entries (forj-tools-test--parse "```tool-call
{\"id\": \"1\", \"name\": \"write_file\", \"args\": {\"path\": \"a\", \"content\": \"\", \"append\": false, \"x\": null, \"l\": []}}
```
"))
         (call (plist-get (car entries) :call)))
    (should (equal (forj-tools-json-encode call)
                   "{\"id\":\"1\",\"name\":\"write_file\",\"args\":{\"path\":\"a\",\"content\":\"\",\"append\":false,\"x\":null,\"l\":[]}}"))))

(provide 'forj-tools-test)
;;; forj-tools-test.el ends here
