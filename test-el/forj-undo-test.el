;;; forj-undo-test.el --- Undo and rewind against the real worker  -*- lexical-binding: t; -*-

;;; Commentary:

;; `forj-undo' puts back the files of the last batch (edited files
;; restored, created files deleted) after a dry run shown in the real
;; review buffer, and reverts the buffers visiting them; a file changed
;; since is overwritten only when the user says so.  `forj-rewind' goes
;; back to before a turn of the chat: the code, the conversation, or
;; both.

;;; Code:

(require 'ert)
(require 'forj-chat)
(require 'forj-undo)
(require 'forj-epc-test)
(require 'forj-chat-test)

(defun forj-undo-test--read (root path)
  "The text of PATH in ROOT, or nil when it does not exist."
  (let ((file (expand-file-name path root)))
    (and (file-exists-p file)
         (with-temp-buffer (insert-file-contents file) (buffer-string)))))

(defun forj-undo-test--approve ()
  "Wait for the review, check it holds a diff, approve it, and commit."
  (should (forj-test--wait-for (lambda () (get-buffer "*forj-review*")) 30))
  (with-current-buffer "*forj-review*"
    (should (string-match-p "^ *┃\\|---" (buffer-string)))
    (forj-review-approve-all)
    (forj-review-commit)))

(defun forj-undo-test--edit-and-create (root)
  "Through the worker, edit a.txt and create new.txt in one batch of ROOT."
  (let* ((worker (forj-test--worker root))
         (plan (forj-test--call
                worker "plan"
                (list :turn "t-1"
                      :calls (vector (list :id "r" :name "read_file" :args (list :path "a.txt"))
                                     (list :id "e" :name "edit"
                                           :args (list :path "a.txt" :old_string "alpha" :new_string "ALPHA"))
                                     (list :id "w" :name "write_file"
                                           :args (list :path "new.txt" :content "brand new\n"))))))
         (done (forj-test--call worker "execute" (list :batch_id (plist-get plan :batch_id)
                                                       :approved ["e" "w"]))))
    (should (cl-every (lambda (r) (eq (plist-get r :ok) t)) (plist-get done :results)))
    (should (equal (forj-undo-test--read root "a.txt") "ALPHA\n"))
    (should (equal (forj-undo-test--read root "new.txt") "brand new\n"))))

(ert-deftest forj-test-undo-edited-and-created-files ()
  "Undo restores the edited file, deletes the created one, reverts the buffer; undo again redoes."
  (forj-test-with-project '(("a.txt" . "alpha\n"))
    (make-directory (expand-file-name ".git" root))
    (forj-undo-test--edit-and-create root)
    (let ((visiting (find-file-noselect (expand-file-name "a.txt" root)))
          (default-directory root))
      (unwind-protect
          (progn
            (with-current-buffer visiting (should (equal (buffer-string) "ALPHA\n")))
            (with-temp-buffer
              (setq default-directory root)
              (forj-undo))
            (forj-undo-test--approve)
            (should (forj-test--wait-for (lambda () (not (file-exists-p (expand-file-name "new.txt" root))))
                                         30))
            (should (equal (forj-undo-test--read root "a.txt") "alpha\n"))
            (should (forj-test--wait-for (lambda () (with-current-buffer visiting
                                                      (equal (buffer-string) "alpha\n")))
                                         5))
            ;; The undo is a batch of its own: undoing it brings the changes back.
            (with-temp-buffer
              (setq default-directory root)
              (forj-undo))
            (forj-undo-test--approve)
            (should (forj-test--wait-for (lambda () (equal (forj-undo-test--read root "new.txt") "brand new\n"))
                                         30))
            (should (equal (forj-undo-test--read root "a.txt") "ALPHA\n")))
        (kill-buffer visiting)))))

(ert-deftest forj-test-undo-edited-created-and-deleted-files ()
  "Undo of a batch that edited, created and deleted files puts all three back."
  (forj-test-with-project '(("a.txt" . "alpha\n") ("old.txt" . "keep me\n"))
    (make-directory (expand-file-name ".git" root))
    (let* ((worker (forj-test--worker root))
           (plan (forj-test--call
                  worker "plan"
                  (list :turn "t-1"
                        :calls (vector (list :id "r" :name "read_file" :args (list :path "a.txt"))
                                       (list :id "e" :name "edit"
                                             :args (list :path "a.txt" :old_string "alpha"
                                                         :new_string "ALPHA"))
                                       (list :id "w" :name "write_file"
                                             :args (list :path "new.txt" :content "brand new\n"))
                                       (list :id "d" :name "fs_delete" :args (list :path "old.txt"))))))
           (done (forj-test--call worker "execute" (list :batch_id (plist-get plan :batch_id)
                                                         :approved ["e" "w" "d"]))))
      (should (cl-every (lambda (r) (eq (plist-get r :ok) t)) (plist-get done :results)))
      (should-not (file-exists-p (expand-file-name "old.txt" root)))
      (let ((default-directory root))
        (with-temp-buffer
          (setq default-directory root)
          (forj-undo))
        (forj-undo-test--approve)
        (should (forj-test--wait-for
                 (lambda () (and (file-exists-p (expand-file-name "old.txt" root))
                                 (not (file-exists-p (expand-file-name "new.txt" root)))
                                 (equal (forj-undo-test--read root "a.txt") "alpha\n")))
                 30))
        (should (equal (forj-undo-test--read root "old.txt") "keep me\n"))))))

(ert-deftest forj-test-undo-changed-file-asks-before-overwriting ()
  "A file changed since forj wrote it is overwritten only when the user says so."
  (forj-test-with-project '(("a.txt" . "alpha\n"))
    (make-directory (expand-file-name ".git" root))
    (forj-undo-test--edit-and-create root)
    (with-temp-file (expand-file-name "a.txt" root) (insert "changed by hand\n"))
    (let ((asked nil)
          (default-directory root))
      ;; No: nothing is changed, the review never opens.
      (cl-letf (((symbol-function 'yes-or-no-p) (lambda (prompt) (push prompt asked) nil)))
        (with-temp-buffer
          (setq default-directory root)
          (forj-undo))
        (should (forj-test--wait-for (lambda () asked) 30)))
      (should (string-match-p "a.txt changed since forj wrote it" (car asked)))
      (should-not (get-buffer "*forj-review*"))
      (should (equal (forj-undo-test--read root "a.txt") "changed by hand\n"))
      (should (equal (forj-undo-test--read root "new.txt") "brand new\n"))
      ;; Yes: the review shows it will be overwritten, and it is.
      (cl-letf (((symbol-function 'yes-or-no-p) (lambda (_prompt) t)))
        (with-temp-buffer
          (setq default-directory root)
          (forj-undo))
        (should (forj-test--wait-for (lambda () (get-buffer "*forj-review*")) 30))
        (with-current-buffer "*forj-review*"
          (should (string-match-p "a.txt changed since forj wrote it; you chose to overwrite it"
                                  (buffer-string)))
          (should (string-match-p "-changed by hand" (buffer-string))))
        (forj-undo-test--approve))
      ;; The undo writes its files one after the other: wait for both.
      (should (forj-test--wait-for
               (lambda () (and (equal (forj-undo-test--read root "a.txt") "alpha\n")
                               (not (file-exists-p (expand-file-name "new.txt" root)))))
               30)))))

;;; Rewind

(defun forj-undo-test--write-reply (path content)
  "A reply that writes CONTENT to PATH."
  (list :text (concat "Writing.\n\n"
                      (forj-chat-test--block
                       (format "{\"id\": \"%s\", \"name\": \"write_file\", \"args\": {\"path\": \"%s\", \"content\": \"%s\"}}"
                               path path content)))))

(defmacro forj-undo-test--two-turns (&rest body)
  "Run BODY in a chat with two turns, each of which wrote a file."
  (declare (indent 0) (debug t))
  `(forj-chat-test-with-session '(("keep.txt" . "keep\n"))
       (list (forj-undo-test--write-reply "one.txt" "1")
             (list :text "Wrote one.")
             (forj-undo-test--write-reply "two.txt" "2")
             (list :text "Wrote two."))
     (forj-chat-test--say "Write one.")
     (forj-undo-test--approve)
     (should (forj-chat-test--wait-idle))
     (forj-chat-test--say "Write two.")
     (forj-undo-test--approve)
     (should (forj-chat-test--wait-idle))
     (should (equal (forj-undo-test--read root "one.txt") "1"))
     (should (equal (forj-undo-test--read root "two.txt") "2"))
     (let ((turns (mapcar (lambda (e) (plist-get e :turn))
                          (cl-remove-if-not (lambda (e) (equal (plist-get e :role) "user"))
                                            (forj-session-record forj-session)))))
       (should (= (length turns) 2))
       (should (cl-every #'stringp turns))
       ,@body)))

(ert-deftest forj-test-undo-rewind-code-only ()
  "Rewinding the code to before turn two deletes two.txt and keeps the conversation."
  (forj-undo-test--two-turns
    (let ((record (copy-sequence (forj-session-record forj-session))))
      (forj-rewind (nth 1 turns) 'code)
      (forj-undo-test--approve)
      (should (forj-test--wait-for (lambda () (not (file-exists-p (expand-file-name "two.txt" root)))) 30))
      (should (equal (forj-undo-test--read root "one.txt") "1"))
      ;; The conversation is as it was, but for a notice saying what was done.
      (should (equal (cl-remove "notice" (forj-session-record forj-session) :key (lambda (e) (plist-get e :role)) :test #'equal)
                     (cl-remove "notice" record :key (lambda (e) (plist-get e :role)) :test #'equal))))))

(ert-deftest forj-test-undo-rewind-chat-only ()
  "Rewinding the chat to before turn two cuts the record there; the files stay."
  (forj-undo-test--two-turns
    (forj-rewind (nth 1 turns) 'chat)
    (should (equal (mapcar (lambda (e) (plist-get e :turn))
                           (cl-remove-if-not (lambda (e) (equal (plist-get e :role) "user")) (forj-session-record forj-session)))
                   (list (car turns))))
    (should-not (string-match-p "Wrote two" (forj-session-transcript)))
    (should (string-match-p "Wrote one" (forj-session-transcript)))
    (should (equal (forj-session-draft) "Write two."))
    (should (equal (forj-undo-test--read root "two.txt") "2"))
    (should (equal (forj-undo-test--read root "one.txt") "1"))))

(ert-deftest forj-test-undo-rewind-both ()
  "Rewinding both to before turn one restores the files and empties the conversation."
  (forj-undo-test--two-turns
    (forj-rewind (car turns) 'both)
    (forj-undo-test--approve)
    (should (forj-test--wait-for (lambda () (null (cl-find "user" (forj-session-record forj-session)
                                                           :key (lambda (e) (plist-get e :role))
                                                           :test #'equal)))
                                 30))
    (should-not (file-exists-p (expand-file-name "one.txt" root)))
    (should-not (file-exists-p (expand-file-name "two.txt" root)))
    (should (equal (forj-undo-test--read root "keep.txt") "keep\n"))
    (should (equal (forj-session-draft) "Write one."))
    (should-not (string-match-p "Wrote one" (forj-session-transcript)))))

(provide 'forj-undo-test)
;;; forj-undo-test.el ends here
