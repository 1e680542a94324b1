;;; forj-files-test.el --- Buffers of changed files, read-only and modified buffers, git  -*- lexical-binding: t; -*-

;;; Commentary:

;; Against the real worker: after a batch every buffer visiting any
;; file it changed is reverted (multi_edit, an edit the user changed in
;; the review); a read-only buffer or one with unsaved changes is never
;; written behind the user's back; `forj-git-auto-stage' stages what
;; forj changed, in the background.

;;; Code:

(require 'ert)
(require 'forj-tools)
(require 'forj-files)
(require 'forj-epc-test)
(require 'forj-flow-test)

(defun forj-files-test--text (root path)
  "The text of PATH in ROOT."
  (with-temp-buffer (insert-file-contents (expand-file-name path root)) (buffer-string)))

(defun forj-files-test--results (run)
  "Wait for RUN (from `forj-flow-test--run') and return its results."
  (should (forj-test--wait-for (cdr run) 30))
  (prog1 (funcall (cdr run)) (kill-buffer (car run))))

(defconst forj-files-test--write-a
  "```tool-call
{\"id\": \"r\", \"name\": \"read_file\", \"args\": {\"path\": \"a.txt\"}}
```
```tool-call
{\"id\": \"w\", \"name\": \"write_file\", \"args\": {\"path\": \"a.txt\", \"content\": \"from the model\\n\"}}
```
"
  "Calls that read a.txt, then overwrite it.")

(ert-deftest forj-test-files-read-only-buffer-refused ()
  "A call writing a file whose buffer is read-only is refused unless the user lets it."
  (forj-test-with-project '(("a.txt" . "mine\n"))
    (let ((visiting (find-file-noselect (expand-file-name "a.txt" root))))
      (unwind-protect
          (progn
            (with-current-buffer visiting (setq buffer-read-only t))
            ;; deny: refused without a question.
            (let* ((forj-tools-read-only-buffers 'deny)
                   (results (forj-files-test--results (forj-flow-test--run root forj-files-test--write-a))))
              (should (string-match-p "a.txt is read-only in the user's Emacs"
                                      (plist-get (plist-get (nth 1 results) :error) :message))))
            ;; ask, and the user says no: refused.
            (let ((asked nil))
              (cl-letf (((symbol-function 'yes-or-no-p) (lambda (prompt) (setq asked prompt) nil)))
                (let ((results (forj-files-test--results (forj-flow-test--run root forj-files-test--write-a))))
                  (should (string-match-p "read-only in Emacs" asked))
                  (should (eq (plist-get (nth 1 results) :ok) :false)))))
            (should (equal (forj-files-test--text root "a.txt") "mine\n"))
            ;; ask, and the user says yes: it goes to the review as usual.
            (cl-letf (((symbol-function 'yes-or-no-p) (lambda (_) t)))
              (let ((run (forj-flow-test--run root forj-files-test--write-a)))
                (with-current-buffer (forj-flow-test--review-buffer)
                  (forj-review-approve-all)
                  (forj-review-commit))
                (should (eq (plist-get (nth 1 (forj-files-test--results run)) :ok) t))))
            (should (equal (forj-files-test--text root "a.txt") "from the model\n"))
            (with-current-buffer visiting
              (should (equal (buffer-string) "from the model\n"))
              (should buffer-read-only)))
        (kill-buffer visiting)))))

(ert-deftest forj-test-files-modified-buffer-refused ()
  "A call writing a file with unsaved changes in Emacs is refused; the user's text stays."
  (forj-test-with-project '(("a.txt" . "on disk\n"))
    (let ((visiting (find-file-noselect (expand-file-name "a.txt" root)))
          (forj-tools-unsaved-buffers 'deny))
      (unwind-protect
          (progn
            (with-current-buffer visiting
              (erase-buffer)
              (insert "typed, not saved\n"))
            (let ((results (forj-files-test--results (forj-flow-test--run root forj-files-test--write-a))))
              (should (string-match-p "unsaved changes to a.txt"
                                      (plist-get (plist-get (nth 1 results) :error) :message))))
            (should (equal (forj-files-test--text root "a.txt") "on disk\n"))
            (with-current-buffer visiting
              (should (buffer-modified-p))
              (should (equal (buffer-string) "typed, not saved\n"))))
        (with-current-buffer visiting (set-buffer-modified-p nil))
        (kill-buffer visiting)))))

(ert-deftest forj-test-files-multi-edit-and-user-edit-revert-every-buffer ()
  "Every buffer visiting a file the batch changed is reverted, not only the first result's."
  (forj-test-with-project '(("a.txt" . "a1\na2\n") ("b.txt" . "b1\nb2\n") ("c.txt" . "c1\n"))
    (let ((buffers (mapcar (lambda (p) (find-file-noselect (expand-file-name p root)))
                           '("a.txt" "b.txt" "c.txt"))))
      (unwind-protect
          (let ((run (forj-flow-test--run root "```tool-call
{\"id\": \"ra\", \"name\": \"read_file\", \"args\": {\"path\": \"a.txt\"}}
```
```tool-call
{\"id\": \"rb\", \"name\": \"read_file\", \"args\": {\"path\": \"b.txt\"}}
```
```tool-call
{\"id\": \"rc\", \"name\": \"read_file\", \"args\": {\"path\": \"c.txt\"}}
```
```tool-call
{\"id\": \"m\", \"name\": \"multi_edit\", \"args\": {\"edits\": [{\"path\": \"a.txt\", \"start_line\": 1, \"end_line\": 1, \"new_content\": \"A1\\n\"}, {\"path\": \"b.txt\", \"start_line\": 2, \"end_line\": 2, \"new_content\": \"B2\\n\"}]}}
```
```tool-call
{\"id\": \"e\", \"name\": \"edit\", \"args\": {\"path\": \"c.txt\", \"old_string\": \"c1\", \"new_string\": \"C1\"}}
```
")))
            (with-current-buffer (forj-flow-test--review-buffer)
              (forj-review-decide "m" t)
              (forj-review-modify "e" "c.txt" "c1, as the user wants it\n")
              (forj-review-commit))
            (let ((results (forj-files-test--results run)))
              (should (cl-every (lambda (r) (eq (plist-get r :ok) t)) results)))
            (should (equal (mapcar (lambda (b) (with-current-buffer b (buffer-string))) buffers)
                           '("A1\na2\n" "b1\nB2\n" "c1, as the user wants it\n")))
            (should-not (cl-some #'buffer-modified-p buffers)))
        (mapc #'kill-buffer buffers)))))

(ert-deftest forj-test-files-git-auto-stage ()
  "With `forj-git-auto-stage' the files forj wrote are staged in the background."
  (skip-unless (executable-find "git"))
  (forj-test-with-project '(("a.txt" . "a\n"))
    (should (eq 0 (call-process "git" nil nil nil "-C" root "init" "-q")))
    (let* ((forj-git-auto-stage t)
           (run (forj-flow-test--run root "```tool-call
{\"id\": \"w\", \"name\": \"write_file\", \"args\": {\"path\": \"new.txt\", \"content\": \"new\\n\"}}
```
")))
      (with-current-buffer (forj-flow-test--review-buffer)
        (forj-review-approve-all)
        (forj-review-commit))
      (should (eq (plist-get (car (forj-files-test--results run)) :ok) t))
      (should (forj-test--wait-for
               (lambda ()
                 (string-match-p "^A  new.txt$"
                                 (with-temp-buffer
                                   (call-process "git" nil t nil "-C" root "status" "--porcelain")
                                   (buffer-string))))
               10))
      ;; a.txt was not touched by forj: it stays untracked.
      (should (string-match-p "^\\?\\? a.txt$"
                              (with-temp-buffer
                                (call-process "git" nil t nil "-C" root "status" "--porcelain")
                                (buffer-string)))))))

(ert-deftest forj-test-files-git-auto-stage-runs-no-program-of-the-repository ()
  "Auto-staging runs none of the repository's programs: a clean filter (its
driver's name holding `=') and an fsmonitor the repository's own config names."
  (skip-unless (executable-find "git"))
  (forj-test-with-project '(("a.txt" . "a\n"))
    (should (eq 0 (call-process "git" nil nil nil "-C" root "init" "-q")))
    (let ((marker (expand-file-name "PLANTED" (make-temp-file "forj-marks-" t))))
      (with-temp-file (expand-file-name ".git/info/attributes" root)
        (insert "* filter=a=b\n"))
      (with-temp-buffer
        (insert-file-contents (expand-file-name ".git/config" root))
        (goto-char (point-max))
        (insert (format "[filter \"a=b\"]\n\tclean = \"touch %s; cat\"\n" marker)
                (format "[core]\n\tfsmonitor = \"touch %s\"\n" marker))
        (write-region nil nil (expand-file-name ".git/config" root)))
      (let* ((forj-git-auto-stage t)
             (run (forj-flow-test--run root "```tool-call
{\"id\": \"w\", \"name\": \"write_file\", \"args\": {\"path\": \"new.txt\", \"content\": \"new\\n\"}}
```
")))
        (with-current-buffer (forj-flow-test--review-buffer)
          (forj-review-approve-all)
          (forj-review-commit))
        (should (eq (plist-get (car (forj-files-test--results run)) :ok) t))
        ;; The index against HEAD's (empty) tree: git reads no file of the work tree.
        (should (forj-test--wait-for
                 (lambda ()
                   (string-match-p "^new.txt$"
                                   (with-temp-buffer
                                     (call-process "git" nil t nil "-C" root
                                                   "-c" "core.fsmonitor=false"
                                                   "ls-files" "--cached")
                                     (buffer-string))))
                 10))
        (should-not (file-exists-p marker))))))

(ert-deftest forj-test-files-review-says-uncommitted-changes ()
  "A call writing a file with uncommitted changes made outside forj says so in the review."
  (skip-unless (executable-find "git"))
  (forj-test-with-project '(("a.txt" . "committed\n"))
    (let ((process-environment (append '("GIT_AUTHOR_NAME=t" "GIT_AUTHOR_EMAIL=t@example.org"
                                         "GIT_COMMITTER_NAME=t" "GIT_COMMITTER_EMAIL=t@example.org")
                                       process-environment)))
      (should (eq 0 (call-process "git" nil nil nil "-C" root "init" "-q")))
      (should (eq 0 (call-process "git" nil nil nil "-C" root "add" "a.txt")))
      (should (eq 0 (call-process "git" nil nil nil "-C" root "commit" "-q" "-m" "a"))))
    (with-temp-file (expand-file-name "a.txt" root) (insert "changed by hand\n"))
    (let ((run (forj-flow-test--run root forj-files-test--write-a)))
      (with-current-buffer (forj-flow-test--review-buffer)
        (should (string-match-p "⚠ a.txt has uncommitted changes ([A-Z]+) in git, not made by forj"
                                (buffer-string)))
        (forj-review-deny-all)
        (forj-review-commit))
      (forj-files-test--results run))
    (should (equal (forj-files-test--text root "a.txt") "changed by hand\n"))))

(provide 'forj-files-test)
;;; forj-files-test.el ends here
