;;; forj-tools-test.el --- Tests of the tool-call blocks and their tools  -*- lexical-binding: t; -*-

;;; Commentary:

;; Edge cases of `forj-tools-parse-region': what counts as a call, and
;; how everything that does not becomes an error entry, never an error.
;; Then tools driven from Emacs through the real worker: the errors and
;; caps their names promise.

;;; Code:

(require 'ert)
(require 'forj-tools)
(require 'forj-epc-test)

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

;;; Tools through the real worker

(defun forj-tools-test--results (root text &optional decide)
  "Run the tool-call blocks of TEXT in a buffer on ROOT; return the results.
DECIDE, if given, is called in the review buffer when one opens."
  (let ((buffer (generate-new-buffer "*forj-tools-test*"))
        (results 'waiting))
    (unwind-protect
        (with-current-buffer buffer
          (insert text)
          (forj-tools-run-region (point-min) (point-max) (lambda (r) (setq results r)) root)
          (when decide
            (should (forj-test--wait-for (lambda () (or (get-buffer "*forj-review*")
                                                        (not (eq results 'waiting))))
                                         30))
            (when (get-buffer "*forj-review*")
              (with-current-buffer "*forj-review*" (funcall decide))))
          (should (forj-test--wait-for (lambda () (not (eq results 'waiting))) 30))
          results)
      (when (get-buffer "*forj-review*") (kill-buffer "*forj-review*"))
      (kill-buffer buffer))))

(defun forj-tools-test--error (result)
  "The error plist of RESULT, after checking it failed with the full error contract."
  (should (eq (plist-get result :ok) :false))
  (let ((err (plist-get result :error)))
    (dolist (key '(:type :message :details :recovery))
      (should (plist-member err key)))
    (should (> (length (plist-get err :recovery)) 0))
    err))

(ert-deftest forj-test-tools-write-file-validation-fails ()
  "write_file with arguments its schema refuses: a validation error, nothing written."
  (forj-test-with-project '(("a.txt" . "keep\n"))
    (let* ((results (forj-tools-test--results root "```tool-call
{\"id\": \"1\", \"name\": \"write_file\", \"args\": {\"path\": \"a.txt\"}}
```
```tool-call
{\"id\": \"2\", \"name\": \"write_file\", \"args\": {\"path\": \"b.txt\", \"content\": 42}}
```
```tool-call
{\"id\": \"3\", \"name\": \"write_file\", \"args\": {\"path\": \"c.txt\", \"content\": \"x\", \"mode\": \"append\"}}
```
")))
      (should (= (length results) 3))
      (dolist (result results)
        (should (equal (plist-get (forj-tools-test--error result) :type) "validation-error")))
      ;; Each error names what is wrong.
      (should (string-match-p "content" (plist-get (plist-get (nth 0 results) :error) :message)))
      (should (string-match-p "content" (plist-get (plist-get (nth 1 results) :error) :message)))
      (should (string-match-p "mode" (plist-get (plist-get (nth 2 results) :error) :message)))
      (should (equal (with-temp-buffer (insert-file-contents (expand-file-name "a.txt" root))
                                       (buffer-string))
                     "keep\n"))
      (should-not (file-exists-p (expand-file-name "b.txt" root)))
      (should-not (file-exists-p (expand-file-name "c.txt" root))))))

(ert-deftest forj-test-tools-edit-region-bounds ()
  "edit_region outside the file's lines, or with end before start: refused, file intact."
  (forj-test-with-project '(("three.txt" . "one\ntwo\nthree\n"))
    (let* ((results (forj-tools-test--results root "```tool-call
{\"id\": \"r\", \"name\": \"read_file\", \"args\": {\"path\": \"three.txt\"}}
```
```tool-call
{\"id\": \"past\", \"name\": \"edit_region\", \"args\": {\"path\": \"three.txt\", \"start_line\": 10, \"end_line\": 12, \"new_content\": \"x\\n\"}}
```
```tool-call
{\"id\": \"backwards\", \"name\": \"edit_region\", \"args\": {\"path\": \"three.txt\", \"start_line\": 3, \"end_line\": 1, \"new_content\": \"x\\n\"}}
```
```tool-call
{\"id\": \"zero\", \"name\": \"edit_region\", \"args\": {\"path\": \"three.txt\", \"start_line\": 0, \"end_line\": 1, \"new_content\": \"x\\n\"}}
```
" (lambda () (forj-review-approve-all) (forj-review-commit)))))
      (should (eq (plist-get (nth 0 results) :ok) t))
      (dolist (result (cdr results))
        (let ((err (forj-tools-test--error result)))
          (should (member (plist-get err :type) '("validation-error" "process-error")))))
      (should (string-match-p "Lines 10-12 are outside three.txt, which has 3 line"
                              (plist-get (plist-get (nth 1 results) :error) :message)))
      (should (string-match-p "Lines 3-1 are outside"
                              (plist-get (plist-get (nth 2 results) :error) :message)))
      (should (string-match-p "start_line"
                              (plist-get (plist-get (nth 3 results) :error) :message)))
      (should (equal (with-temp-buffer (insert-file-contents (expand-file-name "three.txt" root))
                                       (buffer-string))
                     "one\ntwo\nthree\n")))))

(ert-deftest forj-test-tools-search-matches-capped ()
  "search returns at most max_results matches and says it was truncated."
  (forj-test-with-project `(("many.txt" . ,(mapconcat (lambda (i) (format "needle %d\n" i))
                                                      (number-sequence 1 50) "")))
    (let* ((results (forj-tools-test--results root "```tool-call
{\"id\": \"few\", \"name\": \"search\", \"args\": {\"query\": \"needle\", \"max_results\": 7}}
```
```tool-call
{\"id\": \"all\", \"name\": \"search\", \"args\": {\"query\": \"needle\"}}
```
```tool-call
{\"id\": \"over\", \"name\": \"search\", \"args\": {\"query\": \"needle\", \"max_results\": 1000000}}
```
"))
           (few (plist-get (nth 0 results) :result))
           (all (plist-get (nth 1 results) :result)))
      (should (= (length (plist-get few :matches)) 7))
      (should (eq (plist-get few :truncated) t))
      (should (equal (mapcar (lambda (m) (plist-get m :line)) (plist-get few :matches))
                     '(1 2 3 4 5 6 7)))
      (should (= (length (plist-get all :matches)) 50))
      (should (eq (plist-get all :truncated) :false))
      ;; A cap above the schema's limit is refused, not silently lowered.
      (should (equal (plist-get (forj-tools-test--error (nth 2 results)) :type) "validation-error")))))

(provide 'forj-tools-test)
;;; forj-tools-test.el ends here
