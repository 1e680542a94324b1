;;; forj-tab-width-test.el --- The editor's tab width reaches the edit tools  -*- lexical-binding: t; -*-

;;; Commentary:

;; A file that indents with tabs of two columns, declared nowhere but in
;; the buffer visiting it: an edit whose copy is in spaces comes out with
;; the file's tabs, through the real worker.

;;; Code:

(require 'ert)
(require 'forj-tools)
(require 'forj-review)
(require 'forj-epc-test)
(require 'forj-tools-test)

(defconst forj-tab-width-test--file
  "int f() {\n\tif (a) {\n\t\tb(1,\n\t\t  2);\n\t}\n}\n"
  "A C file indented by one tab a level, with alignment spaces after the tabs.")

(defun forj-tab-width-test--edit (root)
  "Read t.c under ROOT and edit it with a copy in spaces; return the results."
  (forj-tools-test--results root "```tool-call
{\"id\": \"r\", \"name\": \"read_file\", \"args\": {\"path\": \"t.c\"}}
```
```tool-call
{\"id\": \"e\", \"name\": \"edit\", \"args\": {\"path\": \"t.c\", \"old_string\": \"  int f() {\\n    if (a) {\\n      b(1,\\n        2);\\n\", \"new_string\": \"  int f() {\\n    if (a) {\\n      b(1,\\n        2);\\n      c(3,\\n          4);\\n\"}}
```
" (lambda () (forj-review-approve-all) (forj-review-commit))))

(ert-deftest forj-test-tab-width-of-the-visiting-buffer-places-the-edit ()
  "The buffer's `tab-width' of 2 is sent with the plan: the edit lands in 2-column tabs."
  (forj-test-with-project `(("t.c" . ,forj-tab-width-test--file))
    (let ((visiting (find-file-noselect (expand-file-name "t.c" root))))
      (unwind-protect
          (progn
            (with-current-buffer visiting (setq-local tab-width 2))
            (let ((results (forj-tab-width-test--edit root)))
              (should (eq (plist-get (nth 1 results) :ok) t))
              (should (equal (with-temp-buffer
                               (insert-file-contents (expand-file-name "t.c" root))
                               (buffer-string))
                             "int f() {\n\tif (a) {\n\t\tb(1,\n\t\t  2);\n\t\tc(3,\n\t\t\t\t4);\n\t}\n}\n"))))
        (with-current-buffer visiting (set-buffer-modified-p nil))
        (kill-buffer visiting)))))

(ert-deftest forj-test-tab-width-unknown-without-the-buffer-is-refused ()
  "Without the buffer nothing tells the width: a depth the copy's pairs cannot map, refused."
  (forj-test-with-project `(("t.c" . ,forj-tab-width-test--file))
    (let ((results (forj-tab-width-test--edit root)))
      (should (eq (plist-get (nth 1 results) :ok) :false))
      (should (equal (with-temp-buffer
                       (insert-file-contents (expand-file-name "t.c" root))
                       (buffer-string))
                     forj-tab-width-test--file)))))

(provide 'forj-tab-width-test)
;;; forj-tab-width-test.el ends here
