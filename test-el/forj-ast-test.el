;;; forj-ast-test.el --- A rename through the review, against the real worker  -*- lexical-binding: t; -*-

;;; Commentary:

;; `ast_edit' names no file in its arguments: the buffers of source
;; files with unsaved changes are saved before it is planned, its review
;; shows one diff per file, and the buffers of the files it wrote are
;; reverted after.

;;; Code:

(require 'ert)
(require 'forj-tools)
(require 'forj-files)
(require 'forj-epc-test)

(defun forj-ast-test--run (root text)
  "Run the blocks of TEXT in ROOT; return (BUFFER . RESULTS-THUNK)."
  (let ((buffer (generate-new-buffer "*forj-ast-test*"))
        (results 'waiting))
    (with-current-buffer buffer
      (insert text)
      (forj-tools-run-region (point-min) (point-max) (lambda (r) (setq results r)) root))
    (cons buffer (lambda () (unless (eq results 'waiting) results)))))

(ert-deftest forj-test-ast-rename-saves-reviews-and-reverts ()
  "A rename across two files: unsaved source saved first, reviewed per file, reverted."
  (forj-test-with-project '(("a.py" . "def old():\n    return 1\n")
                            ("b.py" . "from a import old\nold()\n"))
    (let ((b (find-file-noselect (expand-file-name "b.py" root)))
          (forj-tools-unsaved-buffers 'save)
          ;; The node id: a hash of file, kind, qualified name and ordinal.
          (id (concat "n" (substring (secure-hash 'sha256 "a.py\0fn\0old\0000") 0 12))))
      (with-current-buffer b (goto-char (point-max)) (insert "x = old\n"))
      (let ((index (forj-ast-test--run root "```tool-call
{\"id\": \"g\", \"name\": \"ast_generate\", \"args\": {\"paths\": [\"*.py\"]}}
```
")))
        (should (forj-test--wait-for (cdr index) 30))
        (should (eq (plist-get (car (funcall (cdr index))) :ok) t))
        (kill-buffer (car index)))
      (let ((run (forj-ast-test--run root (format "```tool-call
{\"id\": \"r\", \"name\": \"ast_edit\", \"args\": {\"target_node_id\": \"%s\", \"new_name\": \"new\"}}
```
" id))))
        (forj-test--wait-for (lambda () (get-buffer "*forj-review*")) 30)
        (with-current-buffer (get-buffer "*forj-review*")
          (let ((text (buffer-string)))
            (should (string-match-p "a/a\\.py" text))
            (should (string-match-p "a/b\\.py" text))
            ;; The saved buffer's line is in the diff: planned from what the user had.
            (should (string-match-p "^\\+x = new$" text)))
          (forj-review-approve-all)
          (forj-review-commit))
        (should (forj-test--wait-for (cdr run) 30))
        (let ((result (car (funcall (cdr run)))))
          (should (eq (plist-get result :ok) t))
          (should (equal (forj-files-changed-by-result result) '("a.py" "b.py"))))
        (should (equal (with-current-buffer b (buffer-string))
                       "from a import new\nnew()\nx = new\n"))
        (kill-buffer (car run)))
      (kill-buffer b))))

(provide 'forj-ast-test)
;;; forj-ast-test.el ends here
